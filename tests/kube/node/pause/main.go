// Command pause holds a pod's namespaces open: it waits for SIGTERM or SIGINT and reaps the
// zombies of processes reparented to it, like registry.k8s.io/pause.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		// reap zombies like the upstream pause
		ch := make(chan os.Signal, 8)
		signal.Notify(ch, syscall.SIGCHLD)
		for range ch {
			for {
				var ws syscall.WaitStatus
				pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}()
	<-c
	os.Exit(0)
}
