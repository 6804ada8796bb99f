//go:build !linux

package notify

func newBodySource(body []byte) bodySource { return bytesSource(body) }
