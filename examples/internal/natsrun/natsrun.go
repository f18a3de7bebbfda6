// Package natsrun runs a NATS server with JetStream inside the calling
// process, so that an example or a test needs no broker installed or
// running: Start it, connect to URL with any NATS client, Stop it. Use does
// the same unless the caller names a server of its own.
//
// The server listens on 127.0.0.1 at a port the kernel picks (other
// processes of the same machine can connect to URL too: the worker processes
// of a multi-process run), keeps JetStream's files in a directory of its own
// that Stop removes, logs nothing and installs no signal handlers. It is a
// development convenience: a production system runs nats-server as a service
// of its own, and points the example's -nats flag at it.
package natsrun

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// DefaultReadyTimeout is how long Start waits for the server to accept
// connections when Options names no ReadyTimeout.
const DefaultReadyTimeout = 10 * time.Second

// Options configure Start. A nil *Options means the defaults; so does the
// zero value of each field.
type Options struct {
	// Port is the client port on 127.0.0.1. Default: 0, a free port the
	// kernel picks.
	Port int
	// Dir holds JetStream's files; Stop leaves it in place. Default: a new
	// temporary directory, which Stop removes.
	Dir string
	// ReadyTimeout bounds the wait for the server to accept connections.
	// Default: DefaultReadyTimeout (10 s).
	ReadyTimeout time.Duration
}

// Server is a running embedded NATS server with JetStream.
type Server struct {
	ns      *server.Server
	dir     string
	tempDir bool // Stop removes dir
}

// Start starts a server and returns once it accepts connections.
func Start(opts *Options) (*Server, error) {
	if opts == nil {
		opts = &Options{}
	}
	if opts.Port < 0 || opts.Port > 65535 {
		return nil, fmt.Errorf("natsrun: Options.Port %d: want 0..65535", opts.Port)
	}
	s := &Server{dir: opts.Dir}
	if s.dir == "" {
		dir, err := os.MkdirTemp("", "natsrun-")
		if err != nil {
			return nil, fmt.Errorf("natsrun: %w", err)
		}
		s.dir, s.tempDir = dir, true
	}
	port := opts.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	ns, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
		Port:      port,
		JetStream: true,
		StoreDir:  s.dir,
		NoLog:     true,
		NoSigs:    true,
	})
	if err != nil {
		s.removeDir()
		return nil, fmt.Errorf("natsrun: %w", err)
	}
	s.ns = ns
	ns.Start() // returns once the server's goroutines run
	timeout := opts.ReadyTimeout
	if timeout <= 0 {
		timeout = DefaultReadyTimeout
	}
	if !ns.ReadyForConnections(timeout) {
		s.Stop()
		return nil, errors.New("natsrun: the server did not accept connections in time")
	}
	return s, nil
}

// Use returns the URL of the server to use: url itself if it is not empty
// (a server the caller runs, as an example's -nats flag names it), else
// that of a server Start(opts) runs in this process. stop stops what Use
// started (nothing for url); call it when done.
func Use(url string, opts *Options) (_ string, stop func(), err error) {
	if url != "" {
		return url, func() {}, nil
	}
	s, err := Start(opts)
	if err != nil {
		return "", nil, err
	}
	return s.URL(), s.Stop, nil
}

// URL returns the address clients connect to, nats://127.0.0.1:PORT.
func (s *Server) URL() string { return s.ns.ClientURL() }

// Stop shuts the server down, waits for its goroutines, and removes the
// temporary directory Start made. Connected clients see the connection
// close. It is safe twice.
func (s *Server) Stop() {
	if s.ns != nil {
		s.ns.Shutdown()
		s.ns.WaitForShutdown()
	}
	s.removeDir()
}

func (s *Server) removeDir() {
	if s.tempDir {
		_ = os.RemoveAll(s.dir)
	}
}
