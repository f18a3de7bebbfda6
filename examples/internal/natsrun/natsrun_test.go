package natsrun

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestStart starts a server, uses JetStream on it (a stream, a publish and
// its deduplicated republish), and stops it: the temporary directory is
// gone and no goroutine is left (TestMain).
func TestStart(t *testing.T) {
	s, err := Start(nil)
	require.NoError(t, err)
	defer s.Stop()
	nc, err := nats.Connect(s.URL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage})
	require.NoError(t, err)
	ack, err := js.Publish(ctx, "t.a", []byte("x"), jetstream.WithMsgID("a#1"))
	require.NoError(t, err)
	require.False(t, ack.Duplicate)
	again, err := js.Publish(ctx, "t.a", []byte("x"), jetstream.WithMsgID("a#1"))
	require.NoError(t, err)
	require.True(t, again.Duplicate, "JetStream dropped the republish")
	require.Equal(t, ack.Sequence, again.Sequence)

	nc.Close()
	s.Stop()
	_, err = os.Stat(s.dir)
	require.True(t, os.IsNotExist(err), "Stop removed %s", s.dir)
	s.Stop() // safe twice
}

// TestStartBadPort fails on a port out of range, starting nothing.
func TestStartBadPort(t *testing.T) {
	_, err := Start(&Options{Port: 70000})
	require.ErrorContains(t, err, "Options.Port")
}

// TestUse returns a URL it is given as it is, starting nothing, and starts
// a server when given none: clients can connect to the URL it returns
// until stop.
func TestUse(t *testing.T) {
	url, stop, err := Use("nats://127.0.0.1:1", nil)
	require.NoError(t, err)
	require.Equal(t, "nats://127.0.0.1:1", url)
	stop()

	url, stop, err = Use("", nil)
	require.NoError(t, err)
	defer stop()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	nc.Close()
	stop()
	_, err = nats.Connect(url, nats.NoReconnect())
	require.Error(t, err, "stop stopped the server")
}
