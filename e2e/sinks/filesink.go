package sinks

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	cc "github.com/twophase/coordinator/clients/go/coordinatorclient"
)

// FileCommittable names the temp file of a checkpoint of a FileSink and the name it gets
// on commit, both relative to the sink's directory.
type FileCommittable struct {
	Temp   string `json:"temp"`
	Final  string `json:"final"`
	Events int    `json:"events"`
}

const (
	tempPrefix  = ".pending-"
	finalPrefix = "part-"
)

// FileSink writes each checkpoint's events, one JSON object per line, to a temp file in
// Dir that it fsyncs (file and directory) in phase one, and renames into place (then
// fsyncs the directory) in phase two. A reader of Dir sees only part-* files, each whole
// or not at all. Commit after a crash is idempotent: a temp file already renamed is found
// under its final name. Abort removes the temp file.
//
// On start (Recover) temp files that no pending item names are reconciled with the
// coordinator, like PGSink does with prepared transactions.
type FileSink struct {
	// Dir holds the sink's files; it must exist. Required.
	Dir string
	// Coordinator is used by Recover to look checkpoints up. Required.
	Coordinator *cc.Coordinator
	// Job and Name are the job and this participant's name in it. Required.
	Job, Name string
	// Input hands out each checkpoint's events. Required.
	Input Input
	// Logger; nil means no logging.
	Logger *slog.Logger
}

var (
	_ cc.Participant[FileCommittable] = (*FileSink)(nil)
	_ cc.Recoverer[FileCommittable]   = (*FileSink)(nil)
)

func (s *FileSink) log() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

func fileNames(checkpoint int64) (temp, final string) {
	return fmt.Sprintf("%s%020d.jsonl", tempPrefix, checkpoint), fmt.Sprintf("%s%020d.jsonl", finalPrefix, checkpoint)
}

// Prepare writes and fsyncs the checkpoint's temp file. A checkpoint without events
// writes nothing and votes with no committables.
func (s *FileSink) Prepare(ctx context.Context, checkpoint int64) ([]FileCommittable, error) {
	events, err := s.Input.Take(ctx, checkpoint)
	if err != nil {
		return nil, err
	}
	if len(events) == 0 {
		return nil, nil
	}
	temp, final := fileNames(checkpoint)
	path := filepath.Join(s.Dir, temp)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, e := range events {
		if err = enc.Encode(e); err != nil {
			break
		}
	}
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncDir(s.Dir)
	}
	if err != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return []FileCommittable{{Temp: temp, Final: final, Events: len(events)}}, nil
}

// Commit renames each temp file to its final name and fsyncs the directory. A temp file
// already renamed is no error; one found under neither name was lost, a Permanent error.
func (s *FileSink) Commit(ctx context.Context, checkpoint int64, committables []FileCommittable) error {
	for _, c := range committables {
		if err := checkName(c.Temp, tempPrefix); err != nil {
			return cc.Permanent(err)
		}
		if err := checkName(c.Final, finalPrefix); err != nil {
			return cc.Permanent(err)
		}
		err := os.Rename(filepath.Join(s.Dir, c.Temp), filepath.Join(s.Dir, c.Final))
		if errors.Is(err, fs.ErrNotExist) {
			if _, serr := os.Stat(filepath.Join(s.Dir, c.Final)); serr == nil {
				continue // renamed before a crash
			}
			return cc.Permanent(fmt.Errorf("checkpoint %d: %s is neither pending nor committed", checkpoint, c.Temp))
		}
		if err != nil {
			return err
		}
	}
	return syncDir(s.Dir)
}

// Abort removes each temp file. One already gone is no error, unless it was committed:
// a Permanent error, since a decision cannot be reversed.
func (s *FileSink) Abort(ctx context.Context, checkpoint int64, committables []FileCommittable) error {
	for _, c := range committables {
		if err := checkName(c.Temp, tempPrefix); err != nil {
			return cc.Permanent(err)
		}
		err := os.Remove(filepath.Join(s.Dir, c.Temp))
		if errors.Is(err, fs.ErrNotExist) {
			if _, serr := os.Stat(filepath.Join(s.Dir, c.Final)); serr == nil && c.Final != "" {
				return cc.Permanent(fmt.Errorf("checkpoint %d: abort of %s, which is committed", checkpoint, c.Final))
			}
			continue
		}
		if err != nil {
			return err
		}
	}
	return syncDir(s.Dir)
}

// checkName refuses committables that would reach outside the directory.
func checkName(name, prefix string) error {
	if !strings.HasPrefix(name, prefix) || filepath.Base(name) != name {
		return fmt.Errorf("committable names %q, not a file of this sink", name)
	}
	return nil
}

// Recover reconciles the temp files in Dir with the coordinator: see PGSink.Recover.
func (s *FileSink) Recover(ctx context.Context, epoch int64, pending []cc.Item[FileCommittable]) error {
	entries, err := os.ReadDir(s.Dir)
	if err != nil {
		return err
	}
	owed := map[string]bool{}
	for _, it := range pending {
		for _, c := range it.Committables {
			owed[c.Temp] = true
		}
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, tempPrefix) || owed[name] {
			continue
		}
		id, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(name, tempPrefix), ".jsonl"), 10, 64)
		if err != nil {
			continue
		}
		cp, err := s.Coordinator.Checkpoint(ctx, s.Job, id, 0)
		if errors.Is(err, cc.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		_, final := fileNames(id)
		c := FileCommittable{Temp: name, Final: final}
		voted := votedWith(cp, s.Name, func(raw cc.Committables) bool {
			cs, err := cc.DecodeCommittables[FileCommittable](raw)
			return err == nil && slices.ContainsFunc(cs, func(x FileCommittable) bool { return x.Temp == name })
		})
		switch {
		case cp.Status == cc.Preparing && voted:
		case (cp.Status == cc.Committing || cp.Status == cc.Committed) && voted:
			if err := s.Commit(ctx, id, []FileCommittable{c}); err != nil {
				return err
			}
		default:
			if err := s.Abort(ctx, id, []FileCommittable{{Temp: name}}); err != nil {
				return err
			}
			s.log().Info("recovered: removed an orphan temp file", "file", name, "status", cp.Status)
		}
	}
	return nil
}

// ReadFiles returns the events of the committed files in dir, in file order.
func ReadFiles(dir string) ([]Event, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var events []Event
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), finalPrefix) {
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		dec := json.NewDecoder(f)
		for {
			var ev Event
			if err := dec.Decode(&ev); err != nil {
				f.Close()
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, fmt.Errorf("%s: %w", e.Name(), err)
			}
			events = append(events, ev)
		}
	}
	return events, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
