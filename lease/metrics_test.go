package lease_test

import (
	"github.com/seqlease/seqlease/lease"
	"github.com/seqlease/seqlease/metrics"
)

// The metrics package's observer of named leases plugs into Config.Observer.
var _ lease.Observer = (*metrics.NamedLeaseObserver)(nil)
