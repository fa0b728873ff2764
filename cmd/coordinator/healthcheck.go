package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/twophase/coordinator/internal/cli"
)

// healthcheckTimeout bounds "coordinator healthcheck": connecting, sending, and reading the
// answer.
const healthcheckTimeout = 5 * time.Second

// Exit statuses of "coordinator healthcheck". Docker's HEALTHCHECK reads 0 as healthy and
// 1 as unhealthy, and reserves 2: invalid flags exit 1 too.
const (
	exitHealthy   = 0
	exitUnhealthy = 1
)

const healthcheckUsage = `coordinator healthcheck: ask a running coordinator whether it is ready.

Usage:
  coordinator healthcheck [--url URL] [--tls-cert-file FILE]
                          [--tls-client-cert-file FILE --tls-client-key-file FILE]

It sends GET URL and exits 0 if the answer is 200, 1 otherwise (any other status, no answer
within 5s, a redirect, invalid flags), with one line saying why: on stdout when healthy, on
stderr when not. Meant for a container's HEALTHCHECK, where there is no shell nor curl.

Flags of healthcheck:
  --url URL    (default http://127.0.0.1:PORT/readyz, PORT from COORDINATOR_LISTEN, else 8080;
               https:// with --tls-cert-file)
        the endpoint to ask; /readyz is 200 when the database answers, its schema is current
        and it can be written
  --tls-cert-file FILE    env COORDINATOR_TLS_CERT_FILE, the coordinator's own setting
        the certificate the coordinator serves HTTPS with: the one the server presents must
        be exactly this one (its name is not checked, since it may not name 127.0.0.1).
        Without it, an https:// URL is checked against the system's CAs
  --tls-client-ca-file FILE    env COORDINATOR_TLS_CLIENT_CA_FILE, the coordinator's own setting
        when set, the coordinator asks every client for a certificate: healthcheck then
        fails at once unless --tls-client-cert-file and --tls-client-key-file give one
  --tls-client-cert-file FILE, --tls-client-key-file FILE    (no environment twins)
        a client certificate signed by a CA of the coordinator's --tls-client-ca-file, and
        its key, to present
`

// healthcheckTLS is how healthcheck connects over HTTPS.
type healthcheckTLS struct {
	certFile       string // the server's certificate, pinned; empty: the system's CAs
	clientCAFile   string // the server asks for client certificates
	clientCertFile string
	clientKeyFile  string
}

// healthcheckCommand is "coordinator healthcheck": args are the arguments after its name.
func healthcheckCommand(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	s := cli.NewSettings("healthcheck")
	var target string
	var tc healthcheckTLS
	s.FS.StringVar(&target, "url", "", "")
	s.FlagOnly("url")
	s.FS.StringVar(&tc.certFile, "tls-cert-file", "", "")
	s.Twin("tls-cert-file", "COORDINATOR_TLS_CERT_FILE")
	s.FS.StringVar(&tc.clientCAFile, "tls-client-ca-file", "", "")
	s.Twin("tls-client-ca-file", "COORDINATOR_TLS_CLIENT_CA_FILE")
	s.FS.StringVar(&tc.clientCertFile, "tls-client-cert-file", "", "")
	s.FlagOnly("tls-client-cert-file")
	s.FS.StringVar(&tc.clientKeyFile, "tls-client-key-file", "", "")
	s.FlagOnly("tls-client-key-file")
	rest, err := s.Parse(args, environ)
	if err == nil && target == "" {
		target = defaultHealthcheckURL(environ)
		if tc.certFile != "" {
			target = "https://" + strings.TrimPrefix(target, "http://")
		}
	}
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, healthcheckUsage)
		return exitHealthy
	}
	if err == nil && len(rest) > 0 {
		err = fmt.Errorf("unexpected argument %q", rest[0])
	}
	secure := false
	if err == nil {
		u, perr := url.Parse(target)
		if perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			err = fmt.Errorf("--url must be an http:// URL, like http://127.0.0.1:8080/readyz, not %q", target)
		} else {
			secure = u.Scheme == "https"
		}
	}
	if err == nil && (tc.clientCertFile == "") != (tc.clientKeyFile == "") {
		err = errors.New("--tls-client-cert-file and --tls-client-key-file go together")
	}
	if err == nil && secure && tc.clientCAFile != "" && tc.clientCertFile == "" {
		err = fmt.Errorf("the coordinator asks every client for a certificate (--tls-client-ca-file %s): "+
			"give one signed by its CA with --tls-client-cert-file and --tls-client-key-file", tc.clientCAFile)
	}
	if err != nil {
		fmt.Fprintf(stderr, "coordinator healthcheck: %v\nRun 'coordinator healthcheck --help' for usage.\n", err)
		return exitUnhealthy
	}
	var tlsConfig *tls.Config
	if secure {
		if tlsConfig, err = tc.config(); err != nil {
			fmt.Fprintf(stderr, "unhealthy: %v\n", err)
			return exitUnhealthy
		}
	}
	if err := healthcheckWith(ctx, target, healthcheckTimeout, tlsConfig); err != nil {
		fmt.Fprintf(stderr, "unhealthy: %v\n", err)
		return exitUnhealthy
	}
	fmt.Fprintf(stdout, "healthy: GET %s answered 200\n", target)
	return exitHealthy
}

// defaultHealthcheckURL is /readyz on the port the coordinator listens on by environ's
// COORDINATOR_LISTEN (the image's setting), else 8080; on loopback unless it listens on one
// address only.
func defaultHealthcheckURL(environ []string) string {
	host, port := "127.0.0.1", "8080"
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if name != "COORDINATOR_LISTEN" {
			continue
		}
		h, p, err := net.SplitHostPort(value)
		if err != nil || p == "" || p == "0" {
			break // the server refuses it, or picks a port nobody knows
		}
		port = p
		if ip := net.ParseIP(h); h != "" && (ip == nil || !ip.IsUnspecified()) {
			host = h
		}
	}
	return "http://" + net.JoinHostPort(host, port) + "/readyz"
}

// healthcheck sends GET target and returns nil if it answered 200 within timeout, else an
// error saying what happened: the status and the problem's detail, or why there was no
// answer. It follows no redirect and takes no proxy: the answer must be the coordinator's.
func healthcheck(ctx context.Context, target string, timeout time.Duration) error {
	return healthcheckWith(ctx, target, timeout, nil)
}

// healthcheckWith is healthcheck with the TLS configuration tlsConfig for https:// (nil:
// Go's default).
func healthcheckWith(ctx context.Context, target string, timeout time.Duration, tlsConfig *tls.Config) error {
	client := &http.Client{
		Timeout:   timeout,
		Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true, TLSClientConfig: tlsConfig},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "coordinator-healthcheck")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	why := http.StatusText(resp.StatusCode)
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/problem+json" {
		var problem struct{ Detail string }
		if json.Unmarshal(body, &problem) == nil && problem.Detail != "" {
			why = problem.Detail
		}
	}
	if loc := resp.Header.Get("Location"); loc != "" {
		why += " (to " + loc + ")"
	}
	return fmt.Errorf("GET %s answered %d: %s", target, resp.StatusCode, why)
}

// config is the TLS configuration of tc, nil when it sets nothing.
func (tc healthcheckTLS) config() (*tls.Config, error) {
	if tc.certFile == "" && tc.clientCertFile == "" {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if tc.certFile != "" {
		want, err := firstCertificate(tc.certFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert-file %s: %w", tc.certFile, err)
		}
		// The certificate may not name the address asked (127.0.0.1): instead of its name
		// and its chain, the certificate itself is checked, byte for byte.
		c.InsecureSkipVerify = true
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the server presented no certificate")
			}
			if got := cs.PeerCertificates[0]; !bytes.Equal(got.Raw, want.Raw) {
				return fmt.Errorf("the server's certificate (serial %s) is not the one in --tls-cert-file %s (serial %s)",
					got.SerialNumber.Text(16), tc.certFile, want.SerialNumber.Text(16))
			}
			return nil
		}
	}
	if tc.clientCertFile != "" {
		cert, err := tls.LoadX509KeyPair(tc.clientCertFile, tc.clientKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-client-cert-file %s, --tls-client-key-file %s: %w", tc.clientCertFile, tc.clientKeyFile, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// firstCertificate is the first certificate of a PEM file: the leaf of a chain.
func firstCertificate(file string) (*x509.Certificate, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	for {
		var block *pem.Block
		if block, data = pem.Decode(data); block == nil {
			return nil, errors.New("no PEM certificate in it")
		}
		if block.Type == "CERTIFICATE" {
			return x509.ParseCertificate(block.Bytes)
		}
	}
}
