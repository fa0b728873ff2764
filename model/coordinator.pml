/*
 * A model of the coordinator's protocol, checked by Spin.
 *
 * One job with two participants and two checkpoints that may be preparing at once
 * (max_concurrent_checkpoints 2). The database is the global state below. Every request
 * that changes it runs as one atomic step: that is the job's lock and the transaction
 * that holds it (rule 8). The network may keep a copy of one vote or ack and deliver it
 * again later, after anything else (a duplicate, a reordering, a request of an instance
 * fenced since), through either of two coordinator processes. Participants crash and
 * register again (their prepared work survives them, as a prepared transaction does); a
 * zombie (an instance already fenced) sends one more vote or ack; the deadline of each
 * checkpoint may pass at any moment, also while a vote travels;
 * an operator aborts, commits or completes one checkpoint by hand; retention deletes
 * what it may, behind the participants.
 *
 * Each guard of the coordinator that a rule depends on can be removed with a BREAK_*
 * switch (spin -DBREAK_FENCING ...); model_test.go checks that every property holds as
 * written and fails without its guard. README.md maps the properties to the rules and
 * to the code that enforces them.
 */

#define NC 2        /* checkpoints the trigger opens, ids 1..NC (index 0..NC-1) */
#define NP 2        /* participants of the job */
#define MAXCONC 2   /* max_concurrent_checkpoints */
#define MAXCRASH 1  /* restarts of participant 0 (participant 1 runs without a crash: the two are alike) */
#define MAXDUP 1    /* requests the network delivers twice */

#define IX(c, p) ((c) * NP + (p))

/* checkpoint status */
#define NONE 0
#define PREPARING 1
#define COMMITTING 2
#define COMMITTED 3
#define ABORTED 4

/* a recorded vote */
#define PREP 1
#define ABRT 2

/* a participant's own prepared work (a prepared transaction, a temp file) */
#define TX_NONE 0
#define TX_PREPARED 1
#define TX_COMMITTED 2
#define TX_ROLLEDBACK 3

/* a message: kind (bit 0; for an operator's request, bits 0-2), epoch (bits 1-2),
 * participant (bit 3), checkpoint (bit 4), type (bits 5-6) */
#define T_VOTE 1
#define T_ACK 2
#define T_OP 3
#define OP_ABORT 1
#define OP_COMMIT 2
#define OP_COMPLETE 3
#define MSG(t, c, p, e, k) ((t) * 32 + (c) * 16 + (p) * 8 + (e) * 2 + (k))
#define M_T(m) ((m) / 32)
#define M_C(m) (((m) / 16) % 2)
#define M_P(m) (((m) / 8) % 2)
#define M_E(m) (((m) / 2) % 4)
#define M_K(m) ((m) % 2)
#define M_OP(m) ((m) % 8)

/* ---- the database ---- */
byte seq;              /* checkpoints opened */
byte status[NC];
bit deleted[NC];       /* removed by retention */
bit late[NC];          /* its deadline has passed */
byte vote[NC * NP];
byte vep[NC * NP];     /* the epoch a vote was given with */
bit acked[NC * NP];
byte epoch[NP];        /* each participant's current epoch */

/* ---- the participants' own resources ---- */
byte ptx[NC * NP];

/* ---- the network ---- */
byte replay;           /* a request the network will deliver again; 0 if none */
byte dups;

/* ---- observations for the properties ---- */
byte decisions[NC];    /* decisions taken on each checkpoint */
bit staleCounted;      /* a vote or ack of a fenced epoch was counted */
bit lateCounted;       /* a vote was counted after its checkpoint's deadline */
bit lowerAborted[NC];  /* a lower checkpoint was aborted while this one was preparing */

#define commitish(c) (status[c] == COMMITTING || status[c] == COMMITTED)

/* ---- the coordinator's guards, each removable ---- */

/* rule 2: every expected participant voted prepared */
#ifdef BREAK_UNANIMITY
#define allPrepared(c) (vote[IX(c, 0)] != ABRT && vote[IX(c, 1)] != ABRT && (vote[IX(c, 0)] == PREP || vote[IX(c, 1)] == PREP))
#else
#define allPrepared(c) (vote[IX(c, 0)] == PREP && vote[IX(c, 1)] == PREP)
#endif

/* rule 5: the vote's or ack's epoch is the participant's current one */
#ifdef BREAK_FENCING
#define fenced(p, e) false
#else
#define fenced(p, e) ((e) != epoch[p])
#endif

/* rule 7: a checkpoint is committed once every participant acked */
#ifdef BREAK_ACKS
#define allAcked(c) true
#else
#define allAcked(c) (acked[IX(c, 0)] && acked[IX(c, 1)])
#endif

/* rule 7: pending lists a commit to the participant whatever epoch voted */
#ifdef BREAK_PENDING
#define listsCommit(c, p, me) (vep[IX(c, p)] == me)
#else
#define listsCommit(c, p, me) true
#endif

/* rule 12: retention deletes only what owes nothing, and never the last committed */
#define owesNothing(c) (status[c] == COMMITTED || (status[c] == ABORTED && (vote[IX(c, 0)] != PREP || acked[IX(c, 0)]) && (vote[IX(c, 1)] != PREP || acked[IX(c, 1)])))
#define lastCommitted(c) (commitish(c) && (c == NC - 1 || !commitish(NC - 1)))
#ifdef BREAK_RETENTION
#define deletable(c) (!deleted[c] && (status[c] == COMMITTED || status[c] == ABORTED) && !lastCommitted(c))
#else
#define deletable(c) (!deleted[c] && owesNothing(c) && !lastCommitted(c))
#endif

/* rule 8: the job's lock around a request */
#ifdef BREAK_LOCK
#define LOCKED
#else
#define LOCKED atomic
#endif

/* ---- the rules ---- */

inline decide(x, s) {
	decisions[x]++;
	status[x] = s;
	late[x] = 0 /* only a preparing checkpoint has a deadline left to pass */
}

/* JobState.abort: decide x aborted, and every higher preparing checkpoint with it (rule 9) */
inline abortAt(x) {
	decide(x, ABORTED);
	r = x + 1;
	do
	:: r < NC ->
		if
		:: status[r] == PREPARING ->
			lowerAborted[r] = 1;
#ifndef BREAK_CASCADE
			decide(r, ABORTED)
#endif
		:: else
		fi;
		r++
	:: else -> break
	od;
	r = 0
}

/* JobState.Expire: abort what passed its deadline, before any rule runs (rule 6) */
inline expire() {
	q = 0;
	do
	:: q < NC ->
		if
		:: status[q] == PREPARING && late[q] -> abortAt(q)
		:: else
		fi;
		q++
	:: else -> break
	od;
	q = 0
}

#ifdef BREAK_DEADLINE
#define EXPIRE skip
#else
#define EXPIRE expire()
#endif

/* JobState.Advance: commit the lowest preparing checkpoints that are complete, and stop
 * at the first that is not (rule 9) */
inline advance() {
	r = 0;
	do
	:: r < NC ->
		if
		:: status[r] == PREPARING ->
			if
			:: allPrepared(r) -> decide(r, COMMITTING)
#ifdef BREAK_ORDER
			:: else
#else
			:: else -> r = NC
#endif
			fi
		:: else
		fi;
		r++
	:: else -> break
	od;
	r = 0
}

inline lowerPreparing(c, result) {
	result = 0;
#ifndef BREAK_ORDER
	r = 0;
	do
	:: r < c -> result = result || status[r] == PREPARING; r++
	:: else -> break
	od;
	r = 0
#endif
}

/* JobState.Vote */
inline handleVote(c, p, e, k) {
	if
	:: deleted[c] -> skip /* 410 gone */
	:: else ->
		EXPIRE;
		if
		:: fenced(p, e) -> skip /* 409 fenced */
		:: else ->
			if
			:: vote[IX(c, p)] != NONE -> skip /* 200 the same vote, or 409 vote_conflict */
			:: status[c] != PREPARING && vote[IX(c, p)] == NONE -> skip /* 409 already_decided */
			:: status[c] == PREPARING && vote[IX(c, p)] == NONE ->
				vote[IX(c, p)] = k + 1;
				vep[IX(c, p)] = e;
				if
				:: e != epoch[p] -> staleCounted = 1
				:: else
				fi;
				if
				:: late[c] -> lateCounted = 1
				:: else
				fi;
				if
				:: k == 1 -> abortAt(c)
				:: else -> advance()
				fi
			fi
		fi
	fi
}

/* JobState.Ack */
inline handleAck(c, p, e) {
	if
	:: deleted[c] -> skip /* 410 gone */
	:: else ->
		EXPIRE;
		if
		:: fenced(p, e) -> skip /* 409 fenced */
		:: else ->
			if
			:: status[c] == PREPARING -> skip /* 409 not_decided */
			:: status[c] != PREPARING && acked[IX(c, p)] -> skip /* 200 acked already */
			:: status[c] != PREPARING && !acked[IX(c, p)] ->
				acked[IX(c, p)] = 1;
				if
				:: e != epoch[p] -> staleCounted = 1
				:: else
				fi;
				if
				:: status[c] == COMMITTING && allAcked(c) -> status[c] = COMMITTED
				:: else
				fi
			fi
		fi
	fi
}

/* JobState.Abort, Commit and Complete, by an operator */
inline handleOp(c, op) {
	if
	:: deleted[c] -> skip /* 410 gone */
	:: else ->
		EXPIRE;
		if
		:: op == OP_ABORT ->
			if
			:: status[c] == PREPARING -> abortAt(c)
#ifdef BREAK_ONE_DECISION
			:: status[c] == COMMITTING || status[c] == COMMITTED -> decide(c, ABORTED)
#endif
			:: else -> skip /* 200 aborted already, or 409 already_decided */
			fi
		:: op == OP_COMMIT ->
			lowerPreparing(c, low);
			if
			:: status[c] == PREPARING && allPrepared(c) && !low -> decide(c, COMMITTING); advance()
			:: else -> skip /* already_decided, 200, votes_missing or lower_checkpoint_open */
			fi;
			low = 0
		:: op == OP_COMPLETE ->
			/* the operator settles what the participants have not, and applies it for them */
			if
			:: status[c] == COMMITTING ->
				r = 0;
				do
				:: r < NP ->
					if
					:: !acked[IX(c, r)] ->
						acked[IX(c, r)] = 1;
						if
						:: ptx[IX(c, r)] == TX_PREPARED -> ptx[IX(c, r)] = TX_COMMITTED
						:: else
						fi
					:: else
					fi;
					r++
				:: else -> break
				od;
				r = 0;
				status[c] = COMMITTED
			:: status[c] == ABORTED ->
				r = 0;
				do
				:: r < NP ->
					if
					:: vote[IX(c, r)] == PREP && !acked[IX(c, r)] ->
						acked[IX(c, r)] = 1;
						if
						:: ptx[IX(c, r)] == TX_PREPARED -> ptx[IX(c, r)] = TX_ROLLEDBACK
						:: else
						fi
					:: else
					fi;
					r++
				:: else -> break
				od;
				r = 0
			:: else -> skip /* 409 not_decided */
			fi
		fi
	fi
}

/* ---- requests ---- */

/* A request runs under the job's lock, in the process that sends it: the coordinator
 * process that serves it does nothing else meanwhile. The network may also keep a copy
 * of one request and deliver it again later, after anything else (a duplicate, a
 * reordering, or the request of an instance that has since been fenced). */
inline serve(m) {
	c = M_C(m); p = M_P(m); e = M_E(m); k = M_K(m);
	if
	:: M_T(m) == T_VOTE -> handleVote(c, p, e, k)
	:: M_T(m) == T_ACK -> handleAck(c, p, e)
	:: M_T(m) == T_OP -> handleOp(c, M_OP(m))
	fi;
	c = 0; p = 0; e = 0; k = 0
}

inline request(m) {
	LOCKED { serve(m) }
}

/* the network may keep a copy of the request m, to deliver it again later */
inline offer(m) {
	if
	:: replay == 0 && dups < MAXDUP -> replay = m; dups++
	:: true
	fi
}

/* ---- the processes ---- */

/* a coordinator process: serves the request the network delivers again, and sweeps
 * expired checkpoints */
proctype Coordinator() {
	byte m, r, q, c, p, e, k;
	bit low;
end:
	do
	:: atomic { replay != 0 -> m = replay; replay = 0; request(m); m = 0 }
#ifndef BREAK_SWEEPER
	:: atomic {
		/* Service.SweepExpired */
		(status[0] == PREPARING && late[0]) || (status[1] == PREPARING && late[1]) ->
		expire()
	   }
#endif
	od
}

/* opens the checkpoints, as many at once as max_concurrent_checkpoints allows */
proctype Trigger() {
	do
	:: atomic { seq < NC && (status[0] == PREPARING) + (status[1] == PREPARING) < MAXCONC -> status[seq] = PREPARING; seq++ }
	:: seq == NC -> break
	od
}

/* the deadline of a preparing checkpoint passes */
proctype Clock() {
end:
	do
	:: atomic { status[0] == PREPARING && !late[0] -> late[0] = 1 }
	:: atomic { status[1] == PREPARING && !late[1] -> late[1] = 1 }
	od
}

/* deletes final checkpoints that owe nothing, behind the participants */
proctype Retention() {
end:
	do
	:: atomic { deletable(0) -> deleted[0] = 1 }
	:: atomic { deletable(1) -> deleted[1] = 1 }
	od
}

/* one request by hand: abort, commit or complete, sent at any moment to a checkpoint on
 * which it may act (any other answers a refusal or 200 and changes nothing) */
proctype Operator() {
	byte m, r, q, c, p, e, k;
	bit low;
	if
	:: atomic {
		if
		:: status[0] != NONE && status[0] != ABORTED -> m = MSG(T_OP, 0, 0, 0, OP_ABORT)
		:: status[0] == PREPARING -> m = MSG(T_OP, 0, 0, 0, OP_COMMIT)
		:: status[0] == COMMITTING || status[0] == ABORTED -> m = MSG(T_OP, 0, 0, 0, OP_COMPLETE)
		:: status[1] != NONE && status[1] != ABORTED -> m = MSG(T_OP, 1, 0, 0, OP_ABORT)
		:: status[1] == PREPARING -> m = MSG(T_OP, 1, 0, 0, OP_COMMIT)
		:: status[1] == COMMITTING || status[1] == ABORTED -> m = MSG(T_OP, 1, 0, 0, OP_COMPLETE)
		fi;
#ifndef BREAK_LOCK
		request(m);
		m = 0
	   }
#else
	   }
		/* served by one coordinator while another serves a participant */
		request(m);
		m = 0
#endif
	:: skip
	fi
}

/* an instance fenced by its successor, still running, sends one more vote (on a
 * checkpoint still preparing) or ack (on a decided one); it is served at once */
proctype Zombie() {
	byte m, r, q, c, p, e, k;
	bit low;
	if
	:: atomic {
		if
		:: epoch[0] > 1 && status[0] == PREPARING -> m = MSG(T_VOTE, 0, 0, epoch[0] - 1, 0)
		:: epoch[0] > 1 && status[0] == PREPARING -> m = MSG(T_VOTE, 0, 0, epoch[0] - 1, 1)
		:: epoch[0] > 1 && (status[0] == COMMITTING || status[0] == ABORTED) -> m = MSG(T_ACK, 0, 0, epoch[0] - 1, 0)
		:: epoch[0] > 1 && status[1] == PREPARING -> m = MSG(T_VOTE, 1, 0, epoch[0] - 1, 0)
		:: epoch[0] > 1 && status[1] == PREPARING -> m = MSG(T_VOTE, 1, 0, epoch[0] - 1, 1)
		:: epoch[0] > 1 && (status[1] == COMMITTING || status[1] == ABORTED) -> m = MSG(T_ACK, 1, 0, epoch[0] - 1, 0)
		fi;
		request(m);
		m = 0
	   }
	:: skip
	fi
}

/* pending lists a vote (pending hides a checkpoint past its deadline): prepare and vote
 * prepared, or vote abort. The deadline may pass while the vote travels: the vote races
 * the deadline. */
inline voteOn(x) {
	atomic {
		status[x] == PREPARING && !late[x] && !deleted[x] && vote[IX(x, me_p)] == NONE ->
		if
		:: ptx[IX(x, me_p)] = TX_PREPARED; m = MSG(T_VOTE, x, me_p, me, 0)
		:: m = MSG(T_VOTE, x, me_p, me, 1)
		fi;
		if
		:: skip
		:: late[x] = 1
		fi;
		offer(m);
		serve(m);
		m = 0
	}
}

/* the participant prepares its work for x, then crashes before its vote is sent */
inline crashPrepared(x) {
	atomic {
		me_p == 0 && crashes < MAXCRASH && status[x] == PREPARING && !late[x] && !deleted[x] && vote[IX(x, me_p)] == NONE ->
		ptx[IX(x, me_p)] = TX_PREPARED;
		crashes++
	}
	goto start
}

/* pending lists a commit: apply it, then ack */
inline commitOf(x) {
	atomic {
		status[x] == COMMITTING && vote[IX(x, me_p)] == PREP && !acked[IX(x, me_p)] && listsCommit(x, me_p, me) ->
		ptx[IX(x, me_p)] = TX_COMMITTED;
		m = MSG(T_ACK, x, me_p, me, 0);
		offer(m);
		serve(m);
		m = 0
	}
}

/* pending lists a roll back: roll back, then ack */
inline rollbackOf(x) {
	atomic {
		status[x] == ABORTED && !deleted[x] && vote[IX(x, me_p)] == PREP && !acked[IX(x, me_p)] ->
		ptx[IX(x, me_p)] = TX_ROLLEDBACK;
		m = MSG(T_ACK, x, me_p, me, 0);
		offer(m);
		serve(m);
		m = 0
	}
}

/* its prepared vote was answered already_decided (or gone) without being counted: nobody
 * will ask for that work, so the participant rolls it back itself */
inline refusedVote(x) {
	atomic {
		ptx[IX(x, me_p)] == TX_PREPARED && vote[IX(x, me_p)] != PREP && (deleted[x] || status[x] != PREPARING) ->
		ptx[IX(x, me_p)] = TX_ROLLEDBACK
	}
}

/*
 * A participant, as the protocol asks it to behave (docs/protocol.md, "What participants
 * must do"): register on every start, recover, then prepare and vote on what pending lists,
 * commit or roll back what it lists, ack after applying. It crashes at most MAXCRASH times;
 * its prepared work survives the crash.
 */
proctype Participant(byte me_p) {
	byte me, m, r, q, c, p, e, k, crashes;
	bit low;

start:
	atomic {
		/* JobState.Register: a new epoch; aborts what this participant had not voted on */
		expire();
		epoch[me_p]++;
		me = epoch[me_p];
		c = 0;
		do
		:: c < NC ->
			if
			:: status[c] == PREPARING && vote[IX(c, me_p)] == NONE -> abortAt(c)
			:: else
			fi;
			c++
		:: else -> break
		od;
		c = 0
	}
	atomic {
		/* recover: roll back prepared work that no recorded prepared vote covers */
		c = 0;
		do
		:: c < NC ->
			if
			:: ptx[IX(c, me_p)] == TX_PREPARED && (deleted[c] || vote[IX(c, me_p)] != PREP) -> ptx[IX(c, me_p)] = TX_ROLLEDBACK
			:: else
			fi;
			c++
		:: else -> break
		od;
		c = 0
	}
end:
	do
	:: voteOn(0)
	:: voteOn(1)
	:: commitOf(0)
	:: commitOf(1)
	:: rollbackOf(0)
	:: rollbackOf(1)
	:: refusedVote(0)
	:: refusedVote(1)
	:: crashPrepared(0)
	:: crashPrepared(1)
	:: me_p == 0 && crashes < MAXCRASH -> crashes++; goto start
	od
}

init {
	atomic {
		run Coordinator();
		run Coordinator();
		run Trigger();
		run Clock();
		run Retention();
		run Operator();
		run Zombie();
		run Participant(0);
		run Participant(1)
	}
}

/* ---- the properties, one per rule, named after it ---- */

#define settledAt(c, p) (vote[IX(c, p)] != PREP || (status[c] == COMMITTED && ptx[IX(c, p)] == TX_COMMITTED) || (status[c] == ABORTED && ptx[IX(c, p)] == TX_ROLLEDBACK))
#define applied(c) (ptx[IX(c, 0)] == TX_COMMITTED && ptx[IX(c, 1)] == TX_COMMITTED)
#define settled(c) (status[c] == COMMITTED || (status[c] == ABORTED && (vote[IX(c, 0)] != PREP || acked[IX(c, 0)]) && (vote[IX(c, 1)] != PREP || acked[IX(c, 1)])))

/* rule 1 (and rule 8, through the job's lock): a checkpoint is decided at most once */
ltl one_decision { [] (decisions[0] <= 1 && decisions[1] <= 1) }

/* rule 2: commit only when every expected participant voted prepared */
ltl unanimity { [] ((commitish(0) -> vote[IX(0, 0)] == PREP && vote[IX(0, 1)] == PREP) && (commitish(1) -> vote[IX(1, 0)] == PREP && vote[IX(1, 1)] == PREP)) }

/* rule 5: no vote or ack of a fenced epoch is counted */
ltl fencing { [] !staleCounted }

/* rule 6: no vote counts after its checkpoint's deadline */
ltl exact_deadlines { [] !lateCounted }

/* rule 7: a committed checkpoint was applied by every participant, and every commit
 * decision reaches its participants' newest instance and becomes committed */
ltl owed_not_forgotten { [] ((status[0] == COMMITTED -> applied(0)) && (status[1] == COMMITTED -> applied(1))) && [] ((status[0] == COMMITTING -> <> (status[0] == COMMITTED)) && (status[1] == COMMITTING -> <> (status[1] == COMMITTED))) }

/* rule 9: no checkpoint commits while a lower one is preparing, nor after a lower one
 * was aborted while it was preparing */
ltl commit_order { [] ((commitish(1) -> status[0] != PREPARING) && !(lowerAborted[1] && commitish(1))) }

/* rule 12: a deleted checkpoint owes nothing: every prepared vote was applied */
ltl owed_never_deleted { [] ((deleted[0] -> settledAt(0, 0) && settledAt(0, 1)) && (deleted[1] -> settledAt(1, 0) && settledAt(1, 1))) }

/* every checkpoint is opened, decided and settled */
ltl settles { <> (seq == NC && settled(0) && settled(1)) }
