package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seqlease/seqlease/store"
)

// readerRow is one line of `readers`.
type readerRow struct {
	Reader     string    `json:"reader"`
	Stream     string    `json:"stream"`
	Checkpoint int64     `json:"checkpoint"`
	Watermark  int64     `json:"watermark"`
	Lag        int64     `json:"lag"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// deletedRow is the output of `delete-checkpoint`.
type deletedRow struct {
	Reader     string `json:"reader"`
	Stream     string `json:"stream"`
	Checkpoint int64  `json:"checkpoint"` // the position it had
	Result     string `json:"result"`
}

// readers lists the readers' checkpoints with their lag (-reader R,
// -stream S to filter).
func (c *cli) readers(ctx context.Context, args []string) error {
	fs := c.flags("readers")
	reader := fs.String("reader", "", "only this reader's checkpoints")
	stream := fs.String("stream", "", "only this stream's checkpoints")
	if _, err := c.positional(fs, args, 0, 0); err != nil {
		return err
	}
	p := &store.ListCheckpointsParams{Reader: *reader, Stream: *stream, Limit: store.MaxListLimit}
	if _, err := store.ValidateListCheckpoints(p); err != nil {
		return usagef("readers: %v", err)
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	var out []readerRow
	var rows [][]string
	for {
		cs, err := c.store.ListCheckpoints(ctx, p)
		if err != nil {
			return c.explain(err, "")
		}
		for _, cp := range cs {
			out = append(out, readerRow{cp.Reader, cp.Stream, cp.Position, cp.Watermark, cp.Lag(), cp.UpdatedAt})
			rows = append(rows, []string{cp.Reader, cp.Stream, fmt.Sprint(cp.Position), fmt.Sprint(cp.Watermark), fmt.Sprint(cp.Lag())})
		}
		if len(cs) < p.Limit {
			break
		}
		p.AfterReader, p.AfterStream = cs[len(cs)-1].Reader, cs[len(cs)-1].Stream
	}
	return c.emit(out, []string{"READER", "STREAM", "CHECKPOINT", "WATERMARK", "LAG"}, rows)
}

// deleteCheckpoint removes a reader's checkpoint of a stream: the reader
// starts from the beginning next time (or from where it is saved next).
func (c *cli) deleteCheckpoint(ctx context.Context, args []string) error {
	fs := c.flags("delete-checkpoint")
	reader := fs.String("reader", "", "the reader (required)")
	stream := fs.String("stream", "", "the stream (required)")
	if _, err := c.positional(fs, args, 0, 0); err != nil {
		return err
	}
	if *reader == "" || *stream == "" {
		return usagef("delete-checkpoint needs -reader R and -stream S")
	}
	if err := store.ValidateCheckpointKey(*reader, *stream); err != nil {
		return usagef("delete-checkpoint: %v", err)
	}
	if err := c.connect(ctx); err != nil {
		return err
	}
	pos, err := c.store.Checkpoint(ctx, *reader, *stream)
	if err != nil {
		return c.explain(err, "")
	}
	err = c.store.DeleteCheckpoint(ctx, *reader, *stream)
	if errors.Is(err, store.ErrCheckpointNotFound) {
		return fmt.Errorf("reader %s has no checkpoint in stream %s (`seqlease readers` lists them)", store.QuoteInput(*reader), store.QuoteInput(*stream))
	}
	if err != nil {
		return c.explain(err, "")
	}
	row := deletedRow{Reader: *reader, Stream: *stream, Checkpoint: pos, Result: "deleted"}
	return c.emit(row, []string{"READER", "STREAM", "CHECKPOINT", "RESULT"},
		[][]string{{*reader, *stream, fmt.Sprint(pos), "deleted"}})
}
