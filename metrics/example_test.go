package metrics_test

import (
	"fmt"

	"github.com/seqlease/seqlease/metrics"
)

// The alert evaluator fires when more than 10 leases expire in one cleanup
// cycle and when more than 100 gaps are open, once each while the condition
// holds, and resolves when it ends. Metrics feeds it; here the events are
// reported by hand.
func ExampleEvaluator() {
	ev, err := metrics.NewEvaluator(&metrics.EvaluatorConfig{
		Sink: func(a metrics.Alert) {
			state := "resolved"
			if a.Firing {
				state = "FIRING"
			}
			fmt.Printf("%s %s (%s): value %v, threshold %v\n", a.Name, state, a.Level, a.Value, a.Threshold)
		},
	})
	if err != nil {
		panic(err)
	}
	ev.Cycle(3)  // a quiet cleanup cycle
	ev.Cycle(25) // a mass expiry
	ev.Cycle(40) // still: no second alert
	ev.Cycle(0)  // over
	ev.OpenGaps(150)
	ev.OpenGaps(20)
	// Output:
	// MassExpiry FIRING (critical): value 25, threshold 10
	// MassExpiry resolved (critical): value 0, threshold 10
	// OpenGaps FIRING (warning): value 150, threshold 100
	// OpenGaps resolved (warning): value 20, threshold 100
}
