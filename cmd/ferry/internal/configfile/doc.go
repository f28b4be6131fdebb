// Package configfile applies an optional YAML file of settings to a set of
// command-line flags: the third source of Ferry's one configuration surface,
// below the command line and the FERRY_* environment variables.
//
// It owns the file's format and the precedence rule. It does not define
// flags, read the environment's values into them, or validate settings: the
// command and app.Config do.
package configfile
