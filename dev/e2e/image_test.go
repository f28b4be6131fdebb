package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/ferrytest"
)

// The image's final stage, as the Dockerfile has it, built with Debian's
// buildah from the content deploy/image/rootfs.sh makes of the static
// binary (built with the Dockerfile's -ldflags) and of this machine's
// ca-certificates and tzdata packages; then ferry runs inside it against
// this test's PostgreSQL schema, RabbitMQ exchange and the embedded
// Temporal server: --help, version, migrate, ping, and a bind of a
// privileged port that the non-root user must be refused. The registry
// images of the Dockerfile cannot be pulled here, so the build stage is
// stood in for by a stage that copies the rootfs in (TestDockerfile, in the
// library module, pins the final stage's text and the build stage's use of
// rootfs.sh). buildah keeps its storage in the test's folder (vfs) and runs
// with chroot isolation, in the host's network.
func TestImage(t *testing.T) {
	t.Parallel()
	buildah, err := exec.LookPath("buildah")
	require.NoError(t, err, "buildah builds and runs the image in this test: `make buildah` installs Debian's package (make test does)")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel) // after the cleanups below, which use ctx
	work := t.TempDir()
	// Each command gets 5 minutes (the first static build compiles every
	// package without cgo); one that should fail at once gets less.
	within := 5 * time.Minute
	run := func(dir string, env []string, name string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, within)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), env...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	must := func(dir string, env []string, name string, args ...string) string {
		t.Helper()
		out, err := run(dir, env, name, args...)
		require.NoError(t, err, "%s %s:\n%s", name, strings.Join(args, " "), out)
		return out
	}

	dockerfile, err := os.ReadFile("../../Dockerfile")
	require.NoError(t, err)
	df := string(dockerfile)
	ld := regexp.MustCompile(`-ldflags="([^"]*)"`).FindStringSubmatch(df)
	require.NotNil(t, ld, "the Dockerfile's go build has no -ldflags")
	commit := "image-test-" + ferrytest.Name("c")
	ldflags := os.Expand(ld[1], func(k string) string {
		return map[string]string{"FERRY_COMMIT": commit, "FERRY_VERSION": "v0.0.0-image-test"}[k]
	})
	bin := filepath.Join(work, "ferry")
	must("../../cmd/ferry", []string{"CGO_ENABLED=0", "GOWORK=off"}, "go", "build", "-trimpath", "-ldflags="+ldflags, "-o", bin, ".")
	bctx := filepath.Join(work, "context")
	must("", nil, "sh", "../../deploy/image/rootfs.sh", bin, filepath.Join(bctx, "rootfs"))

	final := df[strings.LastIndex(df, "\nFROM ")+1:]
	require.True(t, strings.HasPrefix(final, "FROM scratch\n"), final)
	containerfile := filepath.Join(work, "Containerfile")
	require.NoError(t, os.WriteFile(containerfile, []byte("# stands in for the Dockerfile's build stage\nFROM scratch AS build\nCOPY rootfs/ /out/rootfs/\n\n"+final), 0o644))

	store := []string{"--storage-driver", "vfs", "--root", filepath.Join(work, "storage"), "--runroot", filepath.Join(work, "run")}
	b := func(args ...string) (string, error) {
		return run("", nil, buildah, append(append([]string(nil), store...), args...)...)
	}
	mustB := func(args ...string) string {
		t.Helper()
		out, err := b(args...)
		require.NoError(t, err, "buildah %s:\n%s", strings.Join(args, " "), out)
		return strings.TrimSpace(out)
	}
	const image = "localhost/ferry-image-test"
	mustB("build", "--isolation", "chroot", "--layers=false", "-f", containerfile, "-t", image, bctx)
	cfg := mustB("inspect", "--type", "image", "--format", "{{.OCIv1.Config.User}} {{.OCIv1.Config.Entrypoint}} {{.OCIv1.Config.Cmd}}", image)
	require.Equal(t, "65532:65532 [/ferry] [--help]", cfg)

	ctr := mustB("from", image)
	t.Cleanup(func() { _, _ = b("rm", ctr) })

	// What is in the image, and nothing else: no shell, no package manager.
	root := mustB("mount", ctr)
	var top []string
	entries, err := os.ReadDir(root)
	require.NoError(t, err)
	for _, e := range entries {
		top = append(top, e.Name())
	}
	require.ElementsMatch(t, []string{"etc", "ferry", "home", "tmp", "usr"}, top)
	require.NoFileExists(t, filepath.Join(root, "bin", "sh"))
	pkgCerts, err := filepath.Glob("/usr/share/ca-certificates/mozilla/*.crt")
	require.NoError(t, err)
	bundle, err := os.ReadFile(filepath.Join(root, "etc/ssl/certs/ca-certificates.crt"))
	require.NoError(t, err)
	require.Equal(t, len(pkgCerts), bytes.Count(bundle, []byte("-----BEGIN CERTIFICATE-----")), "the package's certificates, no local additions")
	require.FileExists(t, filepath.Join(root, "usr/share/zoneinfo/Europe/Berlin"))
	passwd, err := os.ReadFile(filepath.Join(root, "etc/passwd"))
	require.NoError(t, err)
	require.Contains(t, string(passwd), "\nnonroot:x:65532:65532:")
	mustB("umount", ctr)

	inImage := func(args ...string) (string, error) {
		return b(append([]string{"run", "--isolation", "chroot", ctr, "--", "/ferry"}, args...)...)
	}
	mustRun := func(args ...string) string {
		t.Helper()
		out, err := inImage(args...)
		require.NoError(t, err, "ferry %s in the image:\n%s", strings.Join(args, " "), out)
		return out
	}
	require.Contains(t, mustRun("--help"), "Ferry relays events committed to a PostgreSQL outbox table")
	version := mustRun("version")
	require.Contains(t, version, "ferry v0.0.0-image-test (github.com/ferry-outbox/ferry/cmd/ferry)\n")
	require.Contains(t, version, "commit:       "+commit+"\n", "the Dockerfile's -ldflags reach ferry version")

	// migrate, into a schema no test migrated.
	schema := ferrytest.Name("ferry_image")
	admin, err := pgx.Connect(ctx, ferrytest.PostgresURL())
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close(context.Background()) })
	_, err = admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := admin.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		require.NoError(t, err)
	})
	pgURL := ferrytest.WithSearchPath(ferrytest.PostgresURL(), schema)
	require.Contains(t, mustRun("migrate", "--postgres-url", pgURL), "applied")
	var tables int
	require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename IN ('outbox_events', 'outbox_aggregates')`, schema).Scan(&tables))
	require.Equal(t, 2, tables, "ferry migrate in the image created Ferry's tables")

	br := ferrytest.NewBroker(t, "")
	ping := mustRun("ping", "--postgres-url", pgURL, "--amqp-url", br.URL, "--exchange", br.Exchange,
		"--temporal-address", temporalAddr, "--namespace", namespace)
	require.Contains(t, ping, "ferry: PostgreSQL, Temporal and RabbitMQ answer\n")

	// The image runs as nonroot: a port below 1024 is refused (as root,
	// the codec server would bind it and serve).
	key := make([]byte, 32)
	_, err = rand.Read(key)
	require.NoError(t, err)
	within = time.Minute
	out, err := inImage("codec-server", "--codec-key", base64.StdEncoding.EncodeToString(key), "--listen", "127.0.0.1:1")
	require.Error(t, err, "the codec server bound port 1: the image runs as root?\n%s", out)
	require.Contains(t, out, "bind: permission denied")
}
