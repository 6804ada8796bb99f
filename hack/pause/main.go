// Command pause is the process of a pod's sandbox container on the development node: it holds
// the pod's namespaces open and does nothing until it is told to stop (SIGTERM or SIGINT). It is
// built locally because no registry is reachable to pull one.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// Reap children re-parented to the sandbox when the pod shares one PID namespace.
	signal.Ignore(syscall.SIGCHLD)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
