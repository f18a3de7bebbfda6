package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/seqlease/seqlease/gap"
	"github.com/seqlease/seqlease/store"
)

// filledRow is the output of `fill-gap`: the gap as it is after the fill.
type filledRow struct {
	Stream       string    `json:"stream"`
	Number       int64     `json:"number"`
	Reason       string    `json:"reason"` // the gap's reason, kept
	OperationID  string    `json:"operation_id"`
	Kind         string    `json:"kind"`
	FilledBy     string    `json:"filled_by"`
	FilledAt     time.Time `json:"filled_at"`
	PayloadBytes int       `json:"payload_bytes"`
}

func (c *cli) fillGap(ctx context.Context, args []string) error {
	fs := c.flags("fill-gap")
	by := fs.String("by", "", "who fills the gap, recorded with it (required)")
	payload := fs.String("payload", "", "the payload to commit, as text")
	payloadFile := fs.String("payload-file", "", "read the payload from this file (- for stdin)")
	reasons := fs.String("reason", "", "fill only a gap with one of these reasons, comma-separated (default: any reason)")
	pos, err := c.positional(fs, args, 2, 2)
	if err != nil {
		return err
	}
	stream := pos[0]
	number, err := strconv.ParseInt(pos[1], 10, 64)
	if err != nil || number < 1 {
		return usagef("fill-gap: NUMBER must be a number of at least 1, not %q", pos[1])
	}
	set := 0
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "payload" || f.Name == "payload-file" {
			set++
		}
	})
	if set != 1 {
		return usagef("fill-gap needs one of -payload TEXT and -payload-file FILE")
	}
	data := []byte(*payload)
	if *payloadFile != "" {
		if data, err = readPayload(*payloadFile); err != nil {
			return err
		}
	}
	if err := store.ValidateFill(stream, number, &store.FillParams{Payload: data, FilledBy: *by}); err != nil {
		return usagef("fill-gap: %v (-by names who fills it)", err)
	}
	policy := gap.FillPolicy(gap.FillPolicyFunc(func(context.Context, gap.Gap) (bool, error) {
		return true, nil // running the command is the operator's approval
	}))
	if *reasons != "" {
		policy = gap.FillReasons(strings.Split(*reasons, ",")...)
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	gaps, err := gap.New(c.store, nil)
	if err != nil {
		return err
	}
	err = gaps.Fill(ctx, stream, number, data, &gap.FillOpts{FilledBy: *by, Policy: policy})
	switch {
	case errors.Is(err, gap.ErrRecovered):
		return fmt.Errorf("%w\n(its work was committed again under another number: seqlease inspect %s shows it)", err, stream)
	case errors.Is(err, gap.ErrFillRefused):
		return fmt.Errorf("%w: its reason is not one of -reason %s (seqlease gaps %s shows the reasons)", err, *reasons, stream)
	case errors.Is(err, gap.ErrNotGap):
		return fmt.Errorf("%w: refused, nothing changed (seqlease gaps %s lists the open gaps)", err, stream)
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("%w: %s has not handed out %d", err, stream, number)
	case err != nil:
		return c.explain(err, stream)
	}
	g, err := gaps.Get(ctx, stream, number)
	if err != nil {
		return c.explain(err, stream)
	}
	row := filledRow{stream, number, g.Reason, g.OperationID, g.Kind, g.FilledBy, g.FilledAt, len(data)}
	return c.emit(row, []string{"STREAM", "NUMBER", "REASON", "FILLED BY", "PAYLOAD", "RESULT"},
		[][]string{{stream, fmt.Sprint(number), g.Reason, g.FilledBy, fmt.Sprint(len(data)), "filled"}})
}

// readPayload reads the file name, or stdin for "-", up to one byte more
// than the largest payload (gap.Fill refuses it then).
func readPayload(name string) ([]byte, error) {
	var r io.Reader = os.Stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, fmt.Errorf("-payload-file: %w", err)
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, gap.DefaultMaxPayload+1))
	if err != nil {
		return nil, fmt.Errorf("-payload-file: %w", err)
	}
	return data, nil
}
