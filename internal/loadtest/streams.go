package loadtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// watchers are the event streams bench --streams holds open while it measures: stream i
// follows job i modulo the jobs, and counts the events it reads.
type watchers struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	events atomic.Int64
	failed atomic.Int64
}

func watchStreams(ctx context.Context, cfg benchConfig, jobs []*benchJob, tlsConfig *tls.Config) *watchers {
	ctx, cancel := context.WithCancel(ctx)
	w := &watchers{cancel: cancel}
	if cfg.streams == 0 || len(jobs) == 0 {
		return w
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.streams, TLSClientConfig: tlsConfig}}
	opened := make(chan struct{}, cfg.streams)
	for i := range cfg.streams {
		job := jobs[i%len(jobs)].name
		w.wg.Go(func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.url+"/v1/jobs/"+job+"/events", nil)
			if err != nil {
				w.failed.Add(1)
				opened <- struct{}{}
				return
			}
			if cfg.token != "" {
				req.Header.Set("Authorization", bearer(cfg.token))
			}
			resp, err := client.Do(req)
			opened <- struct{}{}
			if err != nil {
				w.failed.Add(1)
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				w.failed.Add(1)
				return
			}
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(nil, 64<<20)
			for sc.Scan() {
				if bytes.HasPrefix(sc.Bytes(), []byte("event: ")) {
					w.events.Add(1)
				}
			}
		})
	}
	// The streams are open (their heads read) before the rounds begin, or 10 s passed.
	deadline := time.After(10 * time.Second)
	for range cfg.streams {
		select {
		case <-opened:
		case <-deadline:
			return w
		}
	}
	return w
}

// stop closes the streams and returns how many events they read.
func (w *watchers) stop() int64 {
	w.cancel()
	w.wg.Wait()
	return w.events.Load()
}
