// Command cicada is a transparent Redis sidecar proxy.
//
// TEMPORARY: this main only loads and prints the configuration; the proxy
// wiring replaces it.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}

// run returns the exit code: 0 on success, --help and --version, 2 for a
// configuration error.
func run(args, environ []string, stdout, stderr io.Writer) int {
	cfg, err := Load(args, environ)
	switch {
	case errors.Is(err, ErrHelp):
		printUsage(stdout)
		return 0
	case errors.Is(err, ErrVersion):
		fmt.Fprintln(stdout, "cicada", version)
		return 0
	case err != nil:
		fmt.Fprintln(stderr, "cicada:", err)
		return 2
	}
	b, err := json.MarshalIndent(cfg.Redacted(), "", "  ")
	if err != nil {
		fmt.Fprintln(stderr, "cicada:", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s\n", b)
	return 0
}
