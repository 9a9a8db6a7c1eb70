//go:build tools

// Package tools pins CoreDNS, the dev cluster's DNS server for Pods on real Nodes; it is never compiled.
package tools

import (
	_ "github.com/coredns/coredns"
)
