package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/ferrytest"
	"github.com/ferry-outbox/ferry/ferrytest/servers"
)

func secret(prefix string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// rabbitUser creates a RabbitMQ user with a password of its own (guest's
// password is its name, which every URL shows) and deletes it at cleanup.
func rabbitUser(t *testing.T) (user, password string) {
	t.Helper()
	user, password = ferrytest.Name("ferry_secrets"), secret("mq-")
	ctl := func(args ...string) {
		t.Helper()
		out, err := exec.Command("rabbitmqctl", append([]string{"-q"}, args...)...).CombinedOutput()
		require.NoError(t, err, "rabbitmqctl %s: %s", args[0], out)
	}
	ctl("add_user", user, password)
	t.Cleanup(func() { _ = exec.Command("rabbitmqctl", "-q", "delete_user", user).Run() })
	ctl("set_permissions", "-p", "/", user, ".*", ".*", ".*")
	return user, password
}

func withPassword(t *testing.T, raw, password string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	u.User = url.UserPassword(u.User.Username(), password)
	return u.String()
}

// Ferry over TLS everywhere it can be, with secrets everywhere they can be:
// a PostgreSQL password, RabbitMQ over amqps (peer verified against a CA)
// with a user of its own, Temporal over mTLS with an API key (the embedded
// server does not check the key; it is sent, and must never show). Every
// command that connects to a service runs as a child process at debug level
// and never prints a secret, neither in its output nor in its logs; a
// failing one neither: run, poller, worker, consume-example, migrate, ping
// (also with a config file, and five ways of failing), setup-temporal,
// status (text and JSON), blocked, replay, repair (refused: the event is not
// quarantined) and --help. Not run here: dev (it serves its own embedded
// Temporal server, no TLS, no API key), codec-server (it connects to
// nothing) and wal drop-slot (it needs a wal_level=logical cluster).
func TestSecretsNeverPrinted(t *testing.T) {
	t.Parallel()
	e := setup(t)
	pki := servers.NewPKI(t)
	mqUser, mqPassword := rabbitUser(t)
	pgPassword, apiKey := secret("pg-"), secret("tk-")

	amqpTarget, err := url.Parse(e.br.URL)
	require.NoError(t, err)
	amqps := pki.NewTLSProxy(t, amqpTarget.Host, false)
	temporalTLS := pki.NewTLSProxy(t, temporalAddr, true, "h2")

	amqpsURL := (&url.URL{Scheme: "amqps", User: url.UserPassword(mqUser, mqPassword), Host: amqps.Addr(), Path: "/",
		RawQuery: url.Values{"cacertfile": {pki.CAFile}}.Encode()}).String()
	secure := []string{
		"FERRY_POSTGRES_URL=" + withPassword(t, e.db.URL, pgPassword),
		"FERRY_AMQP_URL=" + amqpsURL,
		"FERRY_TEMPORAL_ADDRESS=" + temporalTLS.Addr(),
		"FERRY_TEMPORAL_TLS_CA=" + pki.CAFile,
		"FERRY_TEMPORAL_TLS_CERT=" + pki.ClientCertFile,
		"FERRY_TEMPORAL_TLS_KEY=" + pki.ClientKeyFile,
		"FERRY_TEMPORAL_API_KEY=" + apiKey,
		"FERRY_LOG_LEVEL=debug",
	}
	base := []string{
		"FERRY_TEMPORAL_NAMESPACE=" + namespace, "FERRY_TASK_QUEUE=" + e.taskQueue, "FERRY_EXCHANGE=" + e.br.Exchange,
	}
	secrets := []string{pgPassword, mqPassword, apiKey, url.QueryEscape(pgPassword), "PRIVATE KEY"}
	var outputs []string
	check := func(what, out string) {
		t.Helper()
		outputs = append(outputs, out)
		for _, s := range secrets {
			require.NotContains(t, out, s, "%s printed a secret:\n%s", what, out)
		}
	}

	// The relay delivers through all of it.
	l, stop := e.consume(t)
	run := e.startProcess(t, "run", secure...)
	ids := e.commitN(t, 20, 4)
	waitFor(t, time.Minute, "delivery over amqps and Temporal mTLS", func() bool { return l.unique() == len(ids) })
	stop()

	env := append(base, secure...)
	// The operator's commands, while `ferry run` serves the workflows.
	var delivered string
	for id := range ids {
		delivered = id
		break
	}
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"setup-temporal"}, 0},
		{[]string{"status"}, 0},
		{[]string{"status", "--json"}, 0},
		{[]string{"blocked"}, 0},
		{[]string{"event", delivered}, 0},
		{[]string{"event", delivered, "--json"}, 0},
		{[]string{"replay", "--event", delivered, "--reason", "secrets test", "--actor", "test"}, 0},
		{[]string{"repair", delivered, "--action", "retry", "--reason", "secrets test", "--actor", "test"}, 1},
	} {
		code, out := ferry(t, env, c.args...)
		require.Equal(t, c.code, code, "ferry %s:\n%s", strings.Join(c.args, " "), out)
		check("ferry "+strings.Join(c.args, " "), out)
	}

	require.NoError(t, run.cmd.Process.Signal(syscall.SIGTERM))
	run.waitExit(t, time.Minute)
	require.NoError(t, run.err, "ferry run output:\n%s", run.out.String())
	require.Contains(t, run.out.String(), "amqps://"+mqUser+":xxxxx@")
	check("ferry run", run.out.String())
	_, rejected := temporalTLS.Handshakes()
	require.Zero(t, rejected, "the client certificate was accepted")

	// The other long-running commands: started, given time to connect and
	// log at debug level, stopped.
	for _, sub := range []string{"poller", "worker", "consume-example"} {
		args := []string{sub}
		if sub == "consume-example" {
			// A queue of the test's own, not the example's default on the
			// shared broker (a developer's `ferry dev` consumes from that).
			queue := ferrytest.Name("inventory")
			args = append(args, "--queue", queue)
			t.Cleanup(func() { deleteConsumerQueues(t, e.br.URL, queue) })
		}
		p := e.spawn(t, args, append([]string{childEnv + "=1"}, secure...)...)
		time.Sleep(3 * time.Second)
		require.False(t, p.exited(), "ferry %s runs:\n%s", sub, p.out.String())
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		p.waitExit(t, time.Minute)
		check("ferry "+sub, p.out.String())
	}

	code, out := ferry(t, env, "ping")
	require.Equal(t, 0, code, out)
	check("ferry ping", out)
	code, out = ferry(t, env, "migrate")
	require.Equal(t, 0, code, out)
	check("ferry migrate", out)
	code, out = ferry(t, env, "--help")
	require.Equal(t, 0, code, out)
	check("ferry --help", out)

	// The same secrets from a config file instead of the environment.
	cfgFile := filepath.Join(t.TempDir(), "ferry.yaml")
	var yaml strings.Builder
	for _, kv := range secure {
		k, v, _ := strings.Cut(kv, "=")
		yaml.WriteString(strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(k, "FERRY_"), "_", "-")) + ": '" + v + "'\n")
	}
	cfg := strings.NewReplacer("temporal-namespace", "namespace").Replace(yaml.String())
	require.NoError(t, os.WriteFile(cfgFile, []byte(cfg), 0o600))
	code, out = ferry(t, base, "ping", "--config", cfgFile)
	require.Equal(t, 0, code, out)
	check("ferry ping --config", out)

	// Failures print no secret either, and show that peers are verified.
	failures := []struct {
		name string
		env  []string
		want string
	}{
		{"amqps without the CA: the broker's certificate is refused",
			[]string{"FERRY_AMQP_URL=" + strings.Split(amqpsURL, "?")[0]}, "certificate signed by unknown authority"},
		{"wrong RabbitMQ password",
			[]string{"FERRY_AMQP_URL=" + strings.Replace(amqpsURL, mqPassword, mqPassword+"x", 1)}, "cannot reach RabbitMQ at amqps://" + mqUser + ":xxxxx@"},
		{"Temporal without a client certificate",
			[]string{"FERRY_TEMPORAL_TLS_CERT=", "FERRY_TEMPORAL_TLS_KEY="}, "cannot reach Temporal at " + temporalTLS.Addr()},
		{"PostgreSQL unreachable",
			[]string{"FERRY_POSTGRES_URL=postgres://ferry:" + pgPassword + "@" + ferrytest.ClosedAddr(t) + "/db"}, "cannot reach PostgreSQL at postgres://ferry:xxxxx@"},
		{"bad config file value",
			[]string{"FERRY_CONFIG=" + writeFile(t, "postgres-url: ["+pgPassword+"\n")}, "config file"},
	}
	for _, f := range failures {
		code, out := ferry(t, append(append([]string{}, env...), f.env...), "ping")
		require.Equal(t, 1, code, "%s: %s", f.name, out)
		require.Contains(t, out, f.want, f.name)
		check(f.name, out)
	}
	t.Logf("%d outputs scanned, %d bytes, no secret in any", len(outputs), len(strings.Join(outputs, "")))
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ferry.yaml")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}
