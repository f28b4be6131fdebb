package cli

import (
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/ferry-outbox/ferry/broker"
)

// addTemporalSecurityFlags adds the flags of TLS, mTLS and API key
// authentication to Temporal. PostgreSQL and RabbitMQ need none: their URLs
// carry TLS (sslmode=verify-full; amqps:// with cacertfile, certfile,
// keyfile query parameters).
func addTemporalSecurityFlags(f *pflag.FlagSet, g *globals) {
	f.BoolVar(&g.cfg.TemporalTLS, "temporal-tls", envBool("FERRY_TEMPORAL_TLS", false),
		"dial Temporal over TLS, verified against the system's roots; implied by the other --temporal-tls-* flags and --temporal-api-key (FERRY_TEMPORAL_TLS)")
	f.StringVar(&g.cfg.TemporalTLSCA, "temporal-tls-ca", env("FERRY_TEMPORAL_TLS_CA", ""),
		"PEM file of the CAs that verify Temporal's certificate, instead of the system's roots (FERRY_TEMPORAL_TLS_CA)")
	f.StringVar(&g.cfg.TemporalTLSCert, "temporal-tls-cert", env("FERRY_TEMPORAL_TLS_CERT", ""),
		"PEM file of the client certificate for mTLS; needs --temporal-tls-key (FERRY_TEMPORAL_TLS_CERT)")
	f.StringVar(&g.cfg.TemporalTLSKey, "temporal-tls-key", env("FERRY_TEMPORAL_TLS_KEY", ""),
		"PEM file of the client certificate's key for mTLS (FERRY_TEMPORAL_TLS_KEY)")
	f.StringVar(&g.cfg.TemporalTLSServerName, "temporal-tls-server-name", env("FERRY_TEMPORAL_TLS_SERVER_NAME", ""),
		"name expected in Temporal's certificate; default: the host of --temporal-address (FERRY_TEMPORAL_TLS_SERVER_NAME)")
	f.StringVar(&g.cfg.TemporalAPIKey, "temporal-api-key", env("FERRY_TEMPORAL_API_KEY", ""),
		"API key sent as a bearer token, always over TLS; prefer the environment or the config file to the command line, where other users can see it (FERRY_TEMPORAL_API_KEY)")
	hideSecretDefaults(f)
}

// hideSecretDefaults keeps --help from printing a password or key that a
// FERRY_* variable put into a flag's default.
func hideSecretDefaults(f *pflag.FlagSet) {
	for _, name := range []string{"postgres-url", "amqp-url"} {
		if fl := f.Lookup(name); fl != nil {
			fl.DefValue = broker.Redact(fl.DefValue)
		}
	}
	if fl := f.Lookup("temporal-api-key"); fl != nil && fl.DefValue != "" {
		fl.DefValue = "xxxxx"
	}
}

func envBool(name string, def bool) bool {
	v := env(name, "")
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ferry: %s=%q is not true or false; using %t\n", name, v, def)
		return def
	}
	return b
}
