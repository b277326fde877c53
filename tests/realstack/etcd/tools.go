//go:build tools

// Package tools pins the commands this module builds (tests/realstack/build.sh).
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
