package storetest

import "testing"

// runContract tests the Store and JobTx interfaces directly, as their doc comments in
// coordinator/store.go and coordinator/types.go state them. The tests are in the
// contract_*.go files, by area.
func runContract(t *testing.T, o opener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, b *bundle)
	}{
		{"PutJob/CreateThenUpdate", testPutJobCreateThenUpdate},
		{"PutJob/UpdateReturnsSeqAndEpochs", testPutJobUpdateReturnsSeqAndEpochs},
		{"GetJob/NotFound", testGetJobNotFound},
		{"GetJob/LastCheckpointAndLastCommitted", testGetJobLastCheckpoints},
		{"ListJobs/OrderAndPaging", testListJobsOrderAndPaging},
		{"ListJobs/MixedCasePagingIsConsistent", testListJobsMixedCase},
		{"ListJobs/ShowsLastCheckpointsAndEpochs", testListJobsShowsLastCheckpoints},
		{"Update/MissingJob", testUpdateMissingJob},
		{"View/MissingJob", testViewMissingJob},
		{"View/RefusesWrites", testViewRefusesWrites},
		{"Update/RollsBackOnError", testUpdateRollsBackOnError},
		{"Update/RollsBackOnUnavailable", testUpdateRollsBackOnUnavailable},
		{"Update/CommitsOnRejection", testUpdateCommitsOnRejection},
		{"Update/HoldsTheJobLock", testUpdateHoldsTheJobLock},
		{"JobTx/NowIsTheDatabaseClock", testNow},
		{"JobTx/JobReflectsOwnWrites", testJobReflectsOwnWrites},
		{"Checkpoint/NotFound", testCheckpointNotFound},
		{"Checkpoint/InsertRoundTrip", testCheckpointInsertRoundTrip},
		{"Checkpoint/DecisionRoundTrip", testCheckpointDecisionRoundTrip},
		{"Checkpoint/CommittablesByteForByte", testCommittablesByteForByte},
		{"Checkpoint/KeepsItsConfiguration", testCheckpointKeepsItsConfiguration},
		{"Checkpoint/ReadsAreCopies", testReadsAreCopies},
		{"Seq/ContinuesAfterDeleteAndRecreate", testSeqContinues},
		{"Epochs/SetEpoch", testSetEpoch},
		{"Preparing/OnlyPreparingLowestFirst", testPreparing},
		{"Update/CheckpointHint", testCheckpointHint},
		{"Update/ManyJobsAtOnce", testUpdateManyJobsAtOnce},
		{"Owing/Filters", testOwing},
		{"Owing/AbortedWithoutPreparedVote", testOwingAbortedWithoutPreparedVote},
		{"Idempotency/RoundTrip", testIdempotencyRoundTrip},
		{"ExpiredJobs", testExpiredJobs},
		{"ListCheckpoints/PerJob", testListCheckpointsPerJob},
		{"Participants/AtAGlance", testParticipantsAtAGlance},
		{"Events/InOrder", testEventsInOrder},
		{"ListCheckpoints/Global", testListCheckpointsGlobal},
		{"Subscribe/WokenByCommittedDecision", testSubscribeWoken},
		{"Subscribe/WokenByDecisionInRejectedUpdate", testSubscribeWokenOnRejection},
		{"Subscribe/CancelLeavesOthersWaiting", testSubscribeCancel},
		{"Ready", testReady},
		{"GetCheckpoint", testGetCheckpoint},
		{"ListJobs/Pattern", testListJobsPattern},
		{"ListCheckpoints/Pattern", testListCheckpointsPattern},
		{"Tokens/RoundTrip", testTokensRoundTrip},
		{"Stats", testStats},
		{"Tokens/NameAndDigestUnique", testTokensUnique},
		{"Tokens/DeleteAndVersion", testTokensDeleteAndVersion},
		{"Tokens/ListPages", testTokensListPages},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, o.setup(t))
		})
	}
}

func testReady(t *testing.T, b *bundle) {
	if err := b.store.Ready(b.ctx); err != nil {
		t.Fatalf("Ready on a migrated store: %v", err)
	}
}
