// Package lifecycle is the one Start/Stop lifecycle of seqlease's background
// components (barrier.Barrier, cleanup.Service and the parts it owns): what
// they start, they stop and wait for, whatever order the calls come in.
//
// A component keeps a *Life, made with the error its Start returns once
// stopped (its ErrStopped), and writes its Start and Stop around it:
//
//	func (c *Component) Start(ctx context.Context) error {
//		return c.life.Start(ctx, func(ctx context.Context) error {
//			c.life.Go(c.loop) // the loop gets the run's context
//			return nil
//		})
//	}
//
//	func (c *Component) Stop() { c.life.Stop() }
//
// # The contract
//
//   - Start returns once the component runs: the goroutines its start
//     function launched with Go are started. A second Start does nothing and
//     returns nil; concurrent Starts wait for the first. Start after Stop
//     returns the component's stop error.
//   - Stop cancels the run's context with the stop error as its cause
//     (context.Cause tells a Stop from the end of Start's context) and
//     returns once every goroutine launched with Go has returned. It is safe
//     before Start (the Life is stopped then: Start fails), twice, and from
//     several goroutines at once: every call returns only when the
//     goroutines are gone. A Stop that races a Start waits for that Start.
//   - When Start's context ends, the run ends with it: its goroutines see
//     their context end; State reports Ended. Only Stop (or Cancel) makes
//     the Life Stopped; Start on an Ended Life still returns nil.
//   - A start function that fails ends its run: the goroutines it launched
//     are cancelled (cause: its error) and waited for, Start returns the
//     error, and the Life is not started, so Start may be tried again.
//   - A Life is used once: Stopped is final, as it is for every component
//     that uses it (none restarts after Stop).
//
// # States
//
//	            Start ok                parent ctx ends
//	NotStarted ─────────> Running ──────────────────────> Ended
//	   │  ^  Start fails     │                              │
//	   │  └──────────────────┘                              │
//	   │ Stop / Cancel / Drain    Stop / Cancel / Drain     │
//	   └────────────────────────> Stopped <─────────────────┘
//
// State reads without a lock, for the hot path of calls that need a running
// component (barrier.Barrier's waits).
//
// # Stopping in steps
//
// Stop is Cancel followed by a wait. Cancel, which returns the channel to
// wait on, serves a goroutine of the Life that ends the run itself (a
// Stop there would wait for its own return) and a component that lets its
// goroutines finish for a grace period while another context is still
// live (cleanup's durable-hook deliverer). Drain stops the launch of
// goroutines without cancelling anything: a worker pool lets its queue
// empty for a grace period, then Stop cancels what still runs.
//
// Stop must not be called from a goroutine of the Life, nor Stop or Start
// from a start function: each would wait for itself. Cancel is safe
// anywhere.
package lifecycle
