package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvPgBouncerURL is the environment variable that names a PgBouncer in
// transaction mode in front of the test database.
const EnvPgBouncerURL = "SEQLEASE_TEST_PGBOUNCER_URL"

// pgbouncerStart bounds the start of a throwaway PgBouncer.
const pgbouncerStart = 10 * time.Second

// bouncer is the test binary's throwaway PgBouncer, started on first use
// when EnvPgBouncerURL is unset, and stopped by Main.
var bouncer struct {
	mu  sync.Mutex
	url string
	err error
	cmd *exec.Cmd
	dir string
}

// PgBouncerURL returns the URL of a PgBouncer in transaction mode in front
// of the test database (pgx's default query mode: callers pick theirs):
// EnvPgBouncerURL if set, else a throwaway PgBouncer this test binary
// starts on first use (pgbouncer on PATH or in /usr/sbin; as root it runs
// as the postgres user, since PgBouncer refuses root) and Main stops. It
// fails tb, never skips it, with a message that says how to provide one
// when neither works.
func PgBouncerURL(tb testing.TB) string {
	tb.Helper()
	if u := os.Getenv(EnvPgBouncerURL); u != "" {
		return u
	}
	bouncer.mu.Lock()
	defer bouncer.mu.Unlock()
	if bouncer.url == "" && bouncer.err == nil {
		bouncer.url, bouncer.err = startPgBouncer()
	}
	if bouncer.err != nil {
		tb.Fatalf(`pgtest: no PgBouncer: %v

These tests run through PgBouncer in transaction mode. Provide it in one of these ways:
  - run "make test", which starts one (scripts/with-pgbouncer), installing Debian's
    pgbouncer with apt-get when it is missing;
  - install it (apt-get install -y pgbouncer) so that the tests start one themselves;
  - set %s to the URL of a PgBouncer with pool_mode = transaction in front of
    the test database (%s)`, bouncer.err, EnvPgBouncerURL, redact(URL()))
	}
	return bouncer.url
}

// startPgBouncer starts a PgBouncer in transaction mode in front of URL()
// on a free port of 127.0.0.1 and returns its URL.
func startPgBouncer() (string, error) {
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/pgbouncer"); serr != nil {
			return "", fmt.Errorf("pgbouncer is not installed (not on PATH, not in /usr/sbin)")
		}
		bin = "/usr/sbin/pgbouncer"
	}
	cc, err := pgx.ParseConfig(URL())
	if err != nil {
		return "", fmt.Errorf("parse %s: %w", EnvURL, err)
	}
	if cc.Password != "" {
		return "", errors.New("the test database needs a password: set " + EnvPgBouncerURL + " to a PgBouncer of your own")
	}
	port, err := freePort()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "seqlease-pgbouncer")
	if err != nil {
		return "", err
	}
	ini := fmt.Sprintf(`[databases]
%s = host=%s port=%d dbname=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
max_client_conn = 1000
default_pool_size = 20
ignore_startup_parameters = extra_float_digits
logfile = %s
`, cc.Database, cc.Host, cc.Port, cc.Database, port, filepath.Join(dir, "userlist.txt"), filepath.Join(dir, "pgbouncer.log"))
	files := map[string]string{"pgbouncer.ini": ini, "userlist.txt": strconv.Quote(cc.User) + ` ""` + "\n"}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			return "", errors.Join(err, os.RemoveAll(dir))
		}
	}
	cmd := exec.Command(bin, "-q", filepath.Join(dir, "pgbouncer.ini"))
	cmd.Dir = dir
	if os.Geteuid() == 0 { // PgBouncer refuses to run as root
		if err := runAsPostgres(cmd, dir); err != nil {
			return "", errors.Join(err, os.RemoveAll(dir))
		}
	}
	if err := cmd.Start(); err != nil {
		return "", errors.Join(fmt.Errorf("start %s: %w", bin, err), os.RemoveAll(dir))
	}
	bouncer.cmd, bouncer.dir = cmd, dir
	raw := (&url.URL{Scheme: "postgres", User: url.User(cc.User), Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Path: "/" + cc.Database, RawQuery: "sslmode=disable"}).String()
	ctx, cancel := context.WithTimeout(context.Background(), pgbouncerStart)
	defer cancel()
	for {
		conn, err := pgx.Connect(ctx, raw+"&default_query_exec_mode=simple_protocol")
		if err == nil {
			err = conn.Ping(ctx)
			_ = conn.Close(ctx)
			if err == nil {
				return raw, nil
			}
		}
		if ctx.Err() != nil {
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			stopPgBouncer()
			return "", fmt.Errorf("PgBouncer (%s) did not answer within %v: %w\n%s", bin, pgbouncerStart, err, log)
		}
		time.Sleep(50 * time.Millisecond) // it answers within a few of these
	}
}

// runAsPostgres makes cmd run as the postgres user, who gets dir.
func runAsPostgres(cmd *exec.Cmd, dir string) error {
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("running as root, and PgBouncer refuses root: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for _, p := range []string{dir, filepath.Join(dir, "pgbouncer.ini"), filepath.Join(dir, "userlist.txt")} {
		if err := os.Chown(p, uid, gid); err != nil {
			return err
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	return nil
}

// freePort returns a port of 127.0.0.1 that nothing listened on a moment
// ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// stopPgBouncer stops the throwaway PgBouncer, if any, and removes its
// directory. bouncer.mu must be held, or the tests over.
func stopPgBouncer() {
	if bouncer.cmd != nil {
		_ = bouncer.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() {
			_ = bouncer.cmd.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = bouncer.cmd.Process.Kill()
			<-done
		}
		bouncer.cmd = nil
	}
	if bouncer.dir != "" {
		_ = os.RemoveAll(bouncer.dir)
		bouncer.dir = ""
	}
}
