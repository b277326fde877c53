//go:build tools

// Package tools pins the commands this module builds (tests/realstack/build.sh).
package tools

import (
	_ "sigs.k8s.io/cluster-api-provider-openstack"
)
