package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clusterPrefix starts the name of every throwaway cluster's directory in
// os.TempDir(); the owner file inside names the process that made it.
const clusterPrefix = "seqlease-chaos-pg-"

// ownerFile holds the pid of the process that owns a throwaway cluster.
const ownerFile = "owner.pid"

// Cluster is a throwaway PostgreSQL cluster that a test owns and may stop,
// crash and restart: initdb in a fresh directory of os.TempDir(), the
// server on a free port of 127.0.0.1 with its socket in that directory,
// trust authentication, PostgreSQL's default durability (fsync and
// synchronous_commit on, so an acknowledged commit survives a crash). Run as
// root, as the tests here are, every PostgreSQL program runs as the postgres
// OS user (initdb refuses root) and the directory belongs to it.
type Cluster struct {
	dir  string // owned by the cluster's OS user
	data string
	bin  string
	port int
	user string // the OS user that runs PostgreSQL; empty: this process's
}

// StartCluster makes and starts a throwaway cluster. Close stops and removes
// it; clusters that a dead process left behind (a test binary killed by its
// timeout) are stopped and removed first.
func StartCluster(ctx context.Context) (*Cluster, error) {
	bin, err := postgresBin()
	if err != nil {
		return nil, err
	}
	removeOrphans(bin)
	dir, err := os.MkdirTemp("", clusterPrefix)
	if err != nil {
		return nil, fmt.Errorf("chaos: cluster: %w", err)
	}
	c := &Cluster{dir: dir, data: filepath.Join(dir, "data"), bin: bin}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		c.Close()
		return nil, fmt.Errorf("chaos: cluster: %w", err)
	}
	if os.Geteuid() == 0 {
		c.user = "postgres"
		if err := chownTo(dir, c.user); err != nil {
			c.Close()
			return nil, err
		}
	}
	if out, err := c.run(ctx, "initdb", "-D", c.data, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-locale", "--no-sync"); err != nil {
		c.Close()
		return nil, fmt.Errorf("chaos: initdb: %w\n%s", err, out)
	}
	for range 5 { // a free port can be taken between the probe and the start
		if c.port, err = freePort(); err != nil {
			break
		}
		if err = c.Start(ctx); err == nil {
			return c, nil
		}
	}
	c.Close()
	return nil, err
}

// URL is the connection string of the cluster's database postgres.
func (c *Cluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// Start starts the server (again) and waits until it accepts connections.
func (c *Cluster) Start(ctx context.Context) error {
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=60", c.port, c.dir)
	out, err := c.run(ctx, "pg_ctl", "-D", c.data, "-l", filepath.Join(c.dir, "server.log"), "-w", "-t", "60", "-o", opts, "start")
	if err != nil {
		return fmt.Errorf("chaos: start the cluster: %w\n%s\n%s", err, out, c.Log())
	}
	return nil
}

// Stop stops the server with pg_ctl's shutdown mode: "fast" (clients are
// disconnected, a checkpoint is written) or "immediate" (every server
// process quits at once, like a crash: the next start recovers from the
// WAL).
func (c *Cluster) Stop(ctx context.Context, mode string) error {
	if out, err := c.run(ctx, "pg_ctl", "-D", c.data, "-m", mode, "-w", "-t", "60", "stop"); err != nil {
		return fmt.Errorf("chaos: stop the cluster (%s): %w\n%s", mode, err, out)
	}
	return nil
}

// Log returns the end of the server's log, for failure messages.
func (c *Cluster) Log() string {
	b, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Close stops the server at once, if it runs, and removes the cluster's
// directory. It is safe twice.
func (c *Cluster) Close() {
	if _, err := os.Stat(filepath.Join(c.data, "postmaster.pid")); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, _ = c.run(ctx, "pg_ctl", "-D", c.data, "-m", "immediate", "-w", "stop")
		cancel()
	}
	_ = os.RemoveAll(c.dir)
}

// run runs a PostgreSQL program of c.bin as the cluster's OS user, in the
// cluster's directory (which that user can read).
func (c *Cluster) run(ctx context.Context, program string, args ...string) ([]byte, error) {
	name, argv := filepath.Join(c.bin, program), args
	if c.user != "" {
		name, argv = "runuser", append([]string{"-u", c.user, "--", name}, args...)
	}
	cmd := exec.CommandContext(ctx, name, argv...)
	cmd.Dir = c.dir
	return cmd.CombinedOutput()
}

// postgresBin returns the directory of initdb and pg_ctl: the newest
// /usr/lib/postgresql/*/bin that has both, else where PATH finds them.
func postgresBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return version(b) - version(a) })
	for _, d := range dirs {
		if executable(filepath.Join(d, "initdb")) && executable(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if p, err = filepath.EvalSymlinks(p); err == nil && executable(filepath.Join(filepath.Dir(p), "pg_ctl")) {
			return filepath.Dir(p), nil
		}
	}
	return "", errors.New("chaos: initdb and pg_ctl not found (apt-get install postgresql)")
}

// version is the major version in /usr/lib/postgresql/<version>/bin.
func version(dir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return v
}

func executable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode()&0o111 != 0
}

func chownTo(dir, name string) error {
	u, err := user.Lookup(name)
	if err != nil {
		return fmt.Errorf("chaos: cluster owner: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return fmt.Errorf("chaos: cluster owner: %w", err)
	}
	return nil
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("chaos: free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// removeOrphans stops and removes the throwaway clusters whose owner process
// is gone.
func removeOrphans(bin string) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), clusterPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // being made, or not ours
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid == os.Getpid() || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			continue // the owner lives (or this is not a cluster of ours)
		}
		c := &Cluster{dir: dir, data: filepath.Join(dir, "data"), bin: bin}
		if os.Geteuid() == 0 {
			c.user = "postgres"
		}
		c.Close()
	}
}
