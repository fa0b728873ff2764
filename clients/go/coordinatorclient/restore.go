package coordinatorclient

import (
	"context"
	"fmt"
)

// RestorePoint returns the committables participant voted in the job's latest checkpoint
// whose decision is commit (committing or committed), with that checkpoint's id: where a
// source restarts reading after a crash or an abort, like Flink restoring from the last
// completed checkpoint. It returns 0 and nil when no such checkpoint exists. Checkpoints
// the participant was not part of are skipped.
//
// Call it once nothing the participant voted prepared on is still preparing (for instance
// after aborting the job's preparing checkpoints), or the answer may be overtaken by a
// commit.
func RestorePoint[C any](ctx context.Context, c *Coordinator, job, participant string) (int64, []C, error) {
	limit := 100
	statuses := []CheckpointStatus{Committing, Committed}
	params := ListCheckpointsParams{Status: &statuses, Limit: &limit}
	for {
		var page *CheckpointList
		err := c.do(ctx, "list committed checkpoints of "+job, 0, func(ctx context.Context) (outcome, error) {
			r, err := c.client.ListCheckpointsWithResponse(ctx, job, &params)
			if err != nil {
				return outcome{}, err
			}
			page = r.JSON200
			return outcome{r.HTTPResponse, page != nil, r.Body}, nil
		})
		if err != nil {
			return 0, nil, err
		}
		for _, cp := range page.Items { // newest first
			for _, p := range cp.Participants {
				if p.Name != participant || p.Vote == nil || *p.Vote != VoteKindPrepared {
					continue
				}
				cs, err := DecodeCommittables[C](p.Committables)
				if err != nil {
					return 0, nil, fmt.Errorf("restore point of %s/%s: checkpoint %d: %w", job, participant, cp.Id, err)
				}
				return cp.Id, cs, nil
			}
		}
		if page.NextCursor == nil {
			return 0, nil, nil
		}
		params.Cursor = page.NextCursor
	}
}
