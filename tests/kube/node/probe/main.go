// Command probe is the test node's workload: it answers GET /healthz with 200 "ok" on :8080 (for
// the kubelet's probes) until SIGTERM or SIGINT, and says so on stdout (for `kubectl logs`). Built
// FROM scratch into localhost/conclave-probe:local.
package main

import (
	"net/http"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	http.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	})
	go func() {
		if err := http.ListenAndServe(":8080", nil); err != nil {
			os.Stderr.WriteString("probe: " + err.Error() + "\n")
			os.Exit(1)
		}
	}()
	os.Stdout.WriteString("probe: serving /healthz on :8080\n")
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
	<-c
}
