package ttl

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/seqlease/seqlease/store"
)

// SignalFunc reports the load, from 0 (idle) to 1 (saturated), for
// example the share of a connection pool in use. A value outside 0..1 is
// taken as the nearest bound, NaN as 0. It is called for every TTL a
// Policy hands out, so it must be cheap and must not block.
type SignalFunc func() float64

// Booster reports a factor by which to multiply TTLs, 1 meaning none
// (*Fleet).
type Booster interface {
	Factor() float64
}

// Policy chooses a TTL from the load: Min when idle, Max when saturated,
// in proportion between, multiplied by Boost and capped at Max. Its zero
// value is not valid: Min and Max are required. A Policy is not changed by
// its use; it is safe for concurrent use if Signal and Boost are.
type Policy struct {
	// Min is the TTL at no load and without a boost, the shortest the
	// Policy hands out: at least 1 µs. Required.
	Min time.Duration
	// Max is the TTL at full load, and the cap of a boost: in
	// [Min, store.MaxTTL] (and at most the MaxTTL of the Leaser or
	// Manager that uses it). Required.
	Max time.Duration
	// Signal reports the load. Optional: without it the load is 0 and
	// the TTL is Min (times the boost).
	Signal SignalFunc
	// Boost multiplies the TTL: a factor below 1 or NaN counts as 1.
	// Optional (*Fleet for the fleet's cascade boost).
	Boost Booster
}

// FieldError reports a Policy field with a value it cannot take. It
// matches store.ErrInvalidArgument.
type FieldError struct {
	Field  string // "Min", "Max"
	Reason string
}

// Error implements error.
func (e *FieldError) Error() string { return fmt.Sprintf("ttl: Policy.%s %s", e.Field, e.Reason) }

// Is makes a FieldError match store.ErrInvalidArgument.
func (e *FieldError) Is(target error) bool { return target == store.ErrInvalidArgument }

// Validate checks the Policy for a Leaser or Manager whose longest lease
// is maxTTL (0: store.MaxTTL). A refusal is a *FieldError.
func (p *Policy) Validate(maxTTL time.Duration) error {
	if maxTTL <= 0 {
		maxTTL = store.MaxTTL
	}
	switch {
	case p.Min < time.Microsecond || p.Min > maxTTL:
		return &FieldError{"Min", fmt.Sprintf("%v must be in [1µs, %v]", p.Min, maxTTL)}
	case p.Max < p.Min || p.Max > maxTTL:
		return &FieldError{"Max", fmt.Sprintf("%v must be in [Min %v, %v]", p.Max, p.Min, maxTTL)}
	}
	return nil
}

// TTL returns the TTL to use now.
func (p *Policy) TTL() time.Duration {
	load := 0.0
	if p.Signal != nil {
		load = clamp(p.Signal())
	}
	boost := 1.0
	if p.Boost != nil {
		if f := p.Boost.Factor(); f > 1 { // also NaN
			boost = f
		}
	}
	ttl := (float64(p.Min) + load*float64(p.Max-p.Min)) * boost
	if ttl >= float64(p.Max) { // also +Inf
		return p.Max
	}
	return time.Duration(ttl)
}

// clamp takes a load into 0..1, NaN as 0.
func clamp(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return max(0, min(1, v))
}

// errStopped is the cause of a Fleet's context after Stop, and what Start
// returns after it.
var errStopped = errors.New("ttl: fleet stopped")
