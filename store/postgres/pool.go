package postgres

import "github.com/jackc/pgx/v5/pgxpool"

// PoolSaturation returns the share of a pool's connections in use, 0..1,
// from its statistics: acquired connections over the pool's maximum. It is
// the connection-pool signal of the cleanup loop's load probe.
func PoolSaturation(st *pgxpool.Stat) float64 {
	if st == nil || st.MaxConns() <= 0 {
		return 0
	}
	return min(float64(st.AcquiredConns())/float64(st.MaxConns()), 1)
}

// PoolSaturation returns the share of the Store's connection pool in use,
// 0..1 (see the function PoolSaturation), or 0 when its DB is not a pool
// that reports statistics (*pgxpool.Pool does). The cleanup loop uses it
// as its default pool-saturation signal.
func (s *Store) PoolSaturation() float64 {
	p, ok := s.db.(interface{ Stat() *pgxpool.Stat })
	if !ok {
		return 0
	}
	return PoolSaturation(p.Stat())
}
