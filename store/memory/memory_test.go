package memory_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/seqlease/seqlease/store/memory"
	"github.com/seqlease/seqlease/store/storetest"
)

var _ storetest.Store = (*memory.Store)(nil)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestConformanceMemory(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Store { return memory.New(nil) })
}

var _ storetest.NamedLeaseStore = (*memory.Store)(nil)

func TestNamedLeaseConformanceMemory(t *testing.T) {
	storetest.RunNamedLeases(t, func(t *testing.T) storetest.NamedLeaseStore { return memory.New(nil) })
}
