// Package version reports the build's version, set with -ldflags at release time.
package version

import "runtime/debug"

// Version is the release version; "dev" for local builds.
var Version = "dev"

// Commit is the VCS revision the binary was built from, when known.
func Commit() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" {
			return s.Value
		}
	}
	return ""
}
