package loadtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// unknown stands for what a coordinator without GET /v1/info does not tell.
const unknown = "unknown"

// targetInfo is what the coordinator under test says of itself (GET /v1/info), so that a
// report says what it measured.
type targetInfo struct {
	Version   string `json:"version"`
	GoVersion string `json:"go_version"`
	Store     string `json:"store"`
}

// targetInfoTimeout bounds the request for GET /v1/info.
const targetInfoTimeout = 10 * time.Second

// readTarget asks the coordinator for its build and store. When it cannot tell (a
// coordinator older than GET /v1/info answers 404), it warns on progress and returns
// unknown for each; the bench runs all the same.
func readTarget(ctx context.Context, client *benchClient, progress io.Writer) targetInfo {
	ctx, cancel := context.WithTimeout(ctx, targetInfoTimeout)
	defer cancel()
	var info targetInfo
	_, err := client.do(ctx, http.MethodGet, "/v1/info", nil, http.StatusOK, &info)
	var re *requestError
	switch {
	case errors.As(err, &re) && (re.code == "not_found" || re.code == "http_404"):
		fmt.Fprintf(progress, "bench: warning: the coordinator has no GET /v1/info (it is older than this bench): the report cannot say which build and store it measured\n")
	case err != nil:
		fmt.Fprintf(progress, "bench: warning: GET /v1/info failed, so the report cannot say which build and store it measured: %v\n", err)
	}
	for _, field := range []*string{&info.Version, &info.GoVersion, &info.Store} {
		if *field == "" {
			*field = unknown
		}
	}
	return info
}

// describe is the build and store in a few words, for the progress and the report.
func (t targetInfo) describe() string {
	return describeTarget(t.Version, t.GoVersion, t.Store)
}

func describeTarget(version, goVersion, store string) string {
	build := "build " + version
	if goVersion != unknown {
		build += " (" + goVersion + ")"
	}
	return build + ", store " + store
}
