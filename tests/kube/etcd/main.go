// Command etcd is the etcd server, built from the published go.etcd.io/etcd/server/v3 module so
// that Conclave's tests run a real etcd without any downloaded binary.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
