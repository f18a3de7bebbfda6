package postgres

import (
	"testing"
	"time"

	"github.com/seqlease/seqlease/internal/pgtest"
)

// BenchmarkBoundedAcquire measures, without a round trip, what bounding
// the wait adds to taking a connection from a pool with idle ones and
// giving it back.
func BenchmarkBoundedAcquire(b *testing.B) {
	pool := pgtest.Shared(b, false)
	for _, bc := range []struct {
		name string
		p    interface {
			connPool
		}
	}{{"pgxpool", pool}, {"bounded", &boundedPool{p: pool, wait: time.Second}}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c, err := bc.p.Acquire(b.Context())
				if err != nil {
					b.Fatal(err)
				}
				c.Release()
			}
		})
	}
}
