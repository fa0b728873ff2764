package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// tlsPollInterval is how often the files of --tls-cert-file, --tls-key-file and
// --tls-client-ca-file are looked at (their modification time and size) for a change.
const tlsPollInterval = time.Second

// serverTLS serves the certificate of --tls-cert-file and --tls-key-file and, with
// --tls-client-ca-file, asks every client for a certificate signed by one of its CAs. It
// re-reads the files when they change, without a restart: a change is loaded once the
// files stayed the same for one poll (so that a pair being written is not read half-way),
// and one that cannot be loaded is warned of once, the previous certificate or CAs being
// served meanwhile. The handshakes only read what was loaded last.
type serverTLS struct {
	certFile, keyFile, clientCAFile string
	logger                          *slog.Logger
	// nextProtos are the protocols offered by ALPN, most preferred first.
	nextProtos []string

	cert      atomic.Pointer[tls.Certificate]
	forClient atomic.Pointer[tls.Config] // with the client CAs loaded last; nil without --tls-client-ca-file

	// Touched by the start-up and then the watching goroutine only.
	pair, cas watched
}

// startTLS loads the certificate, key and client CAs of cfg and starts watching their
// files. It returns the configuration of the API's listener, nil when cfg serves plain
// HTTP, and a function that stops the watching. An unusable file fails it.
func startTLS(cfg config, logger *slog.Logger) (*tls.Config, func(), error) {
	if cfg.tlsCertFile == "" {
		return nil, func() {}, nil
	}
	s := &serverTLS{certFile: cfg.tlsCertFile, keyFile: cfg.tlsKeyFile, clientCAFile: cfg.tlsClientCAFile, logger: logger,
		nextProtos: []string{"http/1.1"}}
	if cfg.http2 {
		s.nextProtos = []string{"h2", "http/1.1"}
	}
	s.pair.paths = []string{s.certFile, s.keyFile}
	stamp := s.pair.stamp()
	cert, err := loadKeyPair(s.certFile, s.keyFile, time.Now())
	if err != nil {
		return nil, nil, fmt.Errorf("TLS certificate (--tls-cert-file %s, --tls-key-file %s): %w", s.certFile, s.keyFile, err)
	}
	s.pair.loaded(stamp)
	s.cert.Store(cert)
	s.logCert("TLS certificate loaded", cert)

	var pool *x509.CertPool
	if s.clientCAFile != "" {
		s.cas.paths = []string{s.clientCAFile}
		stamp := s.cas.stamp()
		var n int
		if pool, n, err = loadCAs(s.clientCAFile); err != nil {
			return nil, nil, fmt.Errorf("TLS client CAs (--tls-client-ca-file %s): %w", s.clientCAFile, err)
		}
		s.cas.loaded(stamp)
		s.forClient.Store(s.config(pool))
		logger.Info("TLS client CAs loaded: every client must present a certificate signed by one of them",
			"file", s.clientCAFile, "certificates", n)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var watching sync.WaitGroup
	watching.Go(func() {
		ticker := time.NewTicker(tlsPollInterval)
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
				s.poll()
			}
		}
	})
	stop := func() {
		cancel()
		watching.Wait()
	}

	c := s.config(pool)
	if s.clientCAFile != "" {
		c.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) { return s.forClient.Load(), nil }
	}
	return c, stop, nil
}

// config is the listener's configuration with the client CAs pool (nil: none asked for).
// It offers HTTP/2 by ALPN when the server speaks it (cfg.protocols); net/http applies the
// same timeouts to each HTTP/2 stream as to an HTTP/1.1 request, and cancels a request's
// context when its stream is reset or its connection lost.
func (s *serverTLS) config(pool *x509.CertPool) *tls.Config {
	c := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     s.nextProtos,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.cert.Load(), nil },
	}
	if pool != nil {
		c.ClientAuth = tls.RequireAndVerifyClientCert
		c.ClientCAs = pool
	}
	return c
}

// poll loads the files that changed.
func (s *serverTLS) poll() {
	if stamp, due := s.pair.due(); due {
		cert, err := loadKeyPair(s.certFile, s.keyFile, time.Now())
		if err != nil {
			s.pair.failed(stamp)
			s.logger.Warn("TLS certificate files changed but cannot be used; still serving the previous certificate",
				"cert_file", s.certFile, "key_file", s.keyFile, "error", err)
		} else {
			s.pair.loaded(stamp)
			s.cert.Store(cert)
			s.logCert("TLS certificate loaded", cert)
		}
	}
	if s.clientCAFile == "" {
		return
	}
	if stamp, due := s.cas.due(); due {
		pool, n, err := loadCAs(s.clientCAFile)
		if err != nil {
			s.cas.failed(stamp)
			s.logger.Warn("TLS client CA file changed but cannot be used; still asking for certificates of the previous CAs",
				"file", s.clientCAFile, "error", err)
		} else {
			s.cas.loaded(stamp)
			s.forClient.Store(s.config(pool))
			s.logger.Info("TLS client CAs loaded", "file", s.clientCAFile, "certificates", n)
		}
	}
}

// logCert logs what identifies cert: never anything of its key.
func (s *serverTLS) logCert(msg string, cert *tls.Certificate) {
	leaf := cert.Leaf
	attrs := []any{"subject", leaf.Subject.String(), "issuer", leaf.Issuer.String(), "serial", leaf.SerialNumber.Text(16),
		"not_after", leaf.NotAfter.UTC().Format(time.RFC3339)}
	if len(leaf.DNSNames) > 0 || len(leaf.IPAddresses) > 0 {
		names := append([]string(nil), leaf.DNSNames...)
		for _, ip := range leaf.IPAddresses {
			names = append(names, ip.String())
		}
		attrs = append(attrs, "names", names)
	}
	if now := time.Now(); now.Before(leaf.NotBefore) {
		s.logger.Warn(msg+", but it is not valid yet: clients refuse it until then",
			append(attrs, "not_before", leaf.NotBefore.UTC().Format(time.RFC3339))...)
		return
	}
	s.logger.Info(msg, attrs...)
}

// loadKeyPair reads a PEM certificate (its chain following it) and its private key, and
// checks that they match and that the certificate has not expired at now.
func loadKeyPair(certFile, keyFile string, now time.Time) (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		// The errors of crypto/tls name what is wrong, never the key's bytes.
		return nil, err
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, err
		}
	}
	if now.After(cert.Leaf.NotAfter) {
		return nil, fmt.Errorf("the certificate (serial %s) expired at %s", cert.Leaf.SerialNumber.Text(16),
			cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return &cert, nil
}

// loadCAs reads a PEM bundle of CA certificates: every block must be a certificate, and
// there must be at least one.
func loadCAs(file string) (*x509.CertPool, int, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, 0, err
	}
	pool := x509.NewCertPool()
	n := 0
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, 0, fmt.Errorf("PEM block %d is a %q, not a CERTIFICATE", n+1, block.Type)
		}
		ca, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, 0, fmt.Errorf("certificate %d: %w", n+1, err)
		}
		pool.AddCert(ca)
		n++
	}
	if n == 0 {
		return nil, 0, errors.New("no PEM certificate in it")
	}
	return pool, n, nil
}

// watched is the state of files reloaded together when they change.
type watched struct {
	paths []string
	// current is the stamp of the files served; seen, the one the last poll saw; bad, the
	// last stamp that could not be loaded (warned of once).
	current, seen, bad fileStamps
	hasBad             bool
}

type fileStamp struct{ modTime, size int64 }

// fileStamps identifies the state of up to two files; a file that cannot be read is
// {-1, -1}.
type fileStamps [2]fileStamp

func (w *watched) stamp() fileStamps {
	var st fileStamps
	for i, path := range w.paths {
		fi, err := os.Stat(path)
		if err != nil {
			st[i] = fileStamp{-1, -1}
			continue
		}
		st[i] = fileStamp{fi.ModTime().UnixNano(), fi.Size()}
	}
	return st
}

// due reports whether the files should be loaded: they changed since they were loaded,
// were the same at the previous poll (not being written any more), and are not a state
// that already failed.
func (w *watched) due() (fileStamps, bool) {
	st := w.stamp()
	settled := st == w.seen
	w.seen = st
	if st == w.current || !settled || (w.hasBad && st == w.bad) {
		return st, false
	}
	return st, true
}

func (w *watched) loaded(st fileStamps) { w.current, w.seen, w.hasBad = st, st, false }

func (w *watched) failed(st fileStamps) { w.bad, w.hasBad = st, true }
