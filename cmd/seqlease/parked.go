package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/seqlease/seqlease/store"
)

// ReasonGivenUp is the gap reason `give-up` records by default.
const ReasonGivenUp = "given-up"

// RecoveryOperator is the recovery type `fill-parked` records on the entry
// that carries the operator's work.
const RecoveryOperator = "operator"

// parkedRow is one entry of `parked`.
type parkedRow struct {
	Stream      string    `json:"stream"`
	Number      int64     `json:"number"`
	OperationID string    `json:"operation_id"`
	Kind        string    `json:"kind"`
	Owner       string    `json:"owner"`
	ExpiresAt   time.Time `json:"expires_at"`
	ParkedAt    time.Time `json:"parked_at"`
	Attempts    int       `json:"attempts"`
	LastError   string    `json:"last_error"`
}

// parkedResult is the output of `unpark`, `give-up` and `fill-parked`.
type parkedResult struct {
	Stream  string `json:"stream"`
	Number  int64  `json:"number"`
	Result  string `json:"result"`             // unparked, given-up, filled
	Reason  string `json:"reason,omitempty"`   // give-up: the gap's reason
	MovedTo int64  `json:"moved_to,omitempty"` // fill-parked: the number that holds the work
	By      string `json:"by,omitempty"`       // fill-parked: who filled it
}

func (c *cli) parked(ctx context.Context, args []string) error {
	fs := c.flags("parked")
	stream := fs.String("stream", "", "only this stream")
	limit := fs.Int("limit", 100, "entries to show")
	if _, err := c.positional(fs, args, 0, 0); err != nil {
		return err
	}
	if *stream != "" {
		if err := store.ValidateStream(*stream); err != nil {
			return usagef("parked: -stream: %v", err)
		}
	}
	if *limit < 1 || *limit >= store.MaxListLimit {
		return usagef("parked: -limit must be in 1..%d", store.MaxListLimit-1)
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	// One more than asked tells whether there are more.
	es, err := c.store.ListParked(ctx, &store.ListParkedParams{Stream: *stream, Limit: *limit + 1})
	if err != nil {
		return c.explain(err, *stream)
	}
	more := len(es) > *limit
	es = es[:min(len(es), *limit)]
	out := make([]parkedRow, len(es))
	rows := make([][]string, len(es))
	for i, e := range es {
		out[i] = parkedRow{e.Stream, e.Number, e.OperationID, e.Kind, e.Owner, e.ExpiresAt, e.ParkedAt, e.RecoveryAttempts, e.LastRecoveryError}
		rows[i] = []string{e.Stream, fmt.Sprint(e.Number), e.OperationID, e.Kind, e.ParkedAt.Format(time.RFC3339),
			fmt.Sprint(e.RecoveryAttempts), strconv.Quote(e.LastRecoveryError)}
	}
	if err := c.emit(out, []string{"STREAM", "NUMBER", "OPERATION", "KIND", "PARKED", "ATTEMPTS", "LAST ERROR"}, rows); err != nil {
		return err
	}
	if more {
		fmt.Fprintf(c.errOut, "seqlease: more parked entries than -limit %d\n", *limit)
	}
	return nil
}

// entryArgs parses the STREAM NUMBER of the command name.
func (c *cli) entryArgs(name string, fs *flag.FlagSet, args []string) (string, int64, error) {
	pos, err := c.positional(fs, args, 2, 2)
	if err != nil {
		return "", 0, err
	}
	number, err := strconv.ParseInt(pos[1], 10, 64)
	if err != nil || number < 1 {
		return "", 0, usagef("%s: NUMBER must be a number of at least 1, not %q", name, pos[1])
	}
	if err := store.ValidateStream(pos[0]); err != nil {
		return "", 0, usagef("%s: STREAM: %v", name, err)
	}
	return pos[0], number, nil
}

// requireParked returns nil if stream/number is parked, else why not.
func (c *cli) requireParked(ctx context.Context, stream string, number int64) error {
	es, err := c.store.Read(ctx, stream, number-1, 1)
	switch {
	case err != nil:
		return c.explain(err, stream)
	case len(es) == 0 || es[0].Number != number:
		return fmt.Errorf("%w: %s has not handed out %d", store.ErrNotFound, stream, number)
	case !es[0].Parked():
		return fmt.Errorf("%w: %s/%d is %s: refused, nothing changed (seqlease parked lists the parked entries)",
			store.ErrNotParked, stream, number, es[0].State)
	}
	return nil
}

func (c *cli) unpark(ctx context.Context, args []string) error {
	fs := c.flags("unpark")
	stream, number, err := c.entryArgs("unpark", fs, args)
	if err != nil {
		return err
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	err = c.store.UnparkEntry(ctx, stream, number)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("%w: %s has not handed out %d", err, stream, number)
	case errors.Is(err, store.ErrNotParked), errors.Is(err, store.ErrCommitted), errors.Is(err, store.ErrReleased),
		errors.Is(err, store.ErrExpired), errors.Is(err, store.ErrGap):
		return fmt.Errorf("%w: refused, nothing changed (seqlease parked lists the parked entries)", err)
	case err != nil:
		return c.explain(err, stream)
	}
	return c.emit(parkedResult{Stream: stream, Number: number, Result: "unparked"},
		[]string{"STREAM", "NUMBER", "RESULT"}, [][]string{{stream, fmt.Sprint(number), "unparked: the cleanup loop tries it again"}})
}

func (c *cli) giveUp(ctx context.Context, args []string) error {
	fs := c.flags("give-up")
	reason := fs.String("reason", ReasonGivenUp, "the gap's reason")
	stream, number, err := c.entryArgs("give-up", fs, args)
	if err != nil {
		return err
	}
	if *reason == "" {
		return usagef("give-up: -reason must not be empty")
	}
	if err := store.ValidateText("reason", *reason); err != nil {
		return usagef("give-up: -reason: %v", err)
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	if err := c.requireParked(ctx, stream, number); err != nil {
		return err
	}
	if err := c.store.ResolveExpired(ctx, stream, number, &store.ResolveExpiredParams{Reason: *reason}); err != nil {
		return c.explain(err, stream)
	}
	return c.emit(parkedResult{Stream: stream, Number: number, Result: "given-up", Reason: *reason},
		[]string{"STREAM", "NUMBER", "REASON", "RESULT"}, [][]string{{stream, fmt.Sprint(number), *reason, "given up: a gap"}})
}

func (c *cli) fillParked(ctx context.Context, args []string) error {
	fs := c.flags("fill-parked")
	by := fs.String("by", "", "who fills it, recorded as the new entry's owner (required)")
	payload := fs.String("payload", "", "the work to commit, as text")
	payloadFile := fs.String("payload-file", "", "read the work from this file (- for stdin)")
	stream, number, err := c.entryArgs("fill-parked", fs, args)
	if err != nil {
		return err
	}
	set := 0
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "payload" || f.Name == "payload-file" {
			set++
		}
	})
	if set != 1 {
		return usagef("fill-parked needs one of -payload TEXT and -payload-file FILE")
	}
	if *by == "" {
		return usagef("fill-parked: -by names who fills it")
	}
	data := []byte(*payload)
	if *payloadFile != "" {
		if data, err = readPayload(*payloadFile); err != nil {
			return err
		}
	}
	p := &store.RecoverParams{Payload: data, RecoveryType: RecoveryOperator, Owner: *by}
	if err := store.ValidateRecover(stream, number, p); err != nil {
		return usagef("fill-parked: %v", err)
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	if err := c.requireParked(ctx, stream, number); err != nil {
		return err
	}
	moved, err := c.store.RecoverExpired(ctx, stream, number, p)
	if err != nil {
		return c.explain(err, stream)
	}
	return c.emit(parkedResult{Stream: stream, Number: number, Result: "filled", MovedTo: moved, By: *by},
		[]string{"STREAM", "NUMBER", "MOVED TO", "BY", "RESULT"},
		[][]string{{stream, fmt.Sprint(number), fmt.Sprint(moved), *by, "filled: committed under the new number"}})
}

const helpParked = `
Lists the parked entries, in (stream, number) order: expired leases whose
recovery failed as often as the cleanup loop's attempt limit allows
(recovery.Config.MaxAttempts with OnExhausted park), with the attempts and
the last error. A parked entry is still unresolved: its stream waits behind
it, and no cleaner tries it again until an operator chooses: unpark (try
again), fill-parked (commit its work by hand) or give-up (a gap).`

const helpUnpark = `
Lets the cleanup loop try a parked entry again, from zero attempts (its
last error is kept until the next failure). It refuses, changing nothing,
an entry that is not parked.`

const helpGiveUp = `
Gives a parked entry up: it becomes a gap with -reason (default
"given-up"), and its stream goes on. Its work is lost unless the pipeline
redelivers it; fill-parked keeps it. It refuses, changing nothing, an entry
that is not parked.`

const helpFillParked = `
Commits the work of a parked entry by hand, as a successful recovery would:
in one write, the payload is committed under the stream's next number
(recovery type "operator", owner -by, the original operation id and kind)
and the parked number becomes a gap that points at it. It refuses, changing
nothing, an entry that is not parked.`
