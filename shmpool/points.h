/* SPDX-License-Identifier: Apache-2.0 */
/*
 * points.h - the crash points: a name for every step of every protocol on
 * the shared segment, between one atomic step and the next.  A build with
 * --enable-crash-points compiles each HC_POINT(name) into a call that a test
 * can arm to stop or kill the process there, and that a schedule explorer
 * uses as a yield point (crash.h).  Without it they compile to nothing.
 *
 * X(name, flags, what): flags HC_PTF_SPIN mark a wait loop, where a process
 * goes round until another one moves (an explorer runs the others first).
 * The death sweep (tests/test_sweep.c) fails on a point that no scenario
 * reaches, so a point that moves or goes away must be kept in step here.
 */
#ifndef HC_SHMPOOL_POINTS_H
#define HC_SHMPOOL_POINTS_H

#define HC_PTF_SPIN 0x1u

#define HC_POINTS(X)                                                                                                   \
	/* allocation (pages.c) */                                                                                     \
	X(alloc_taken, 0, "alloc: a page is ours (RESERVED), its presence and flags not yet written")                  \
	X(alloc_undo, 0, "alloc: giving back a page of an allocation that failed")                                     \
	/* the free map (freemap.c) */                                                                                 \
	X(freemap_unlisted, 0, "free map: a page is FREE, its bit not yet set")                                        \
	X(freemap_claimed, 0, "free map: a page's bit is ours, the page not yet taken")                                \
	X(freemap_emptied, 0, "free map: a summary bit is cleared, the word below not yet looked at again")            \
	/* commit (pages.c) */                                                                                         \
	X(commit_seen, 0, "commit: the word is read, the CAS that adds our shards not yet made")                       \
	X(commit_done, 0, "commit: our shards are in (READY or more filled), the quota not yet given")                 \
	/* abort (pages.c) */                                                                                          \
	X(abort_seen, 0, "abort: the reservation is read, not yet quarantined")                                        \
	X(abort_quarantined, 0, "abort: QUARANTINE is stored, the key not yet taken out")                              \
	X(abort_unkeyed, 0, "abort: out of the index, not yet FREE")                                                   \
	/* holds: pin, host lock, a co-writer's hold (pages.c) */                                                      \
	X(hold_counted, 0, "hold: our count is up (A), the word not yet read (B)")                                     \
	X(hold_wait, HC_PTF_SPIN, "hold: the page is FREEING; waiting for its freer to put it back")                   \
	X(hold_undone, 0, "hold: the word said no (B); our count is back down")                                        \
	X(unpin_dropped, 0, "unpin/unlock: our count is down, the quota not yet given back")                           \
	/* retirement: free and evict (pages.c) */                                                                     \
	X(retire_freeing, 0, "retire: FREEING is stored (C), the holds not yet read (D)")                              \
	X(retire_putback, 0, "retire: a hold was seen; READY not yet stored back")                                     \
	X(retire_checked, 0, "retire: FREEING aux 1 (nothing held), the key not yet taken out")                        \
	X(retire_unkeyed, 0, "retire: out of the index, FREE (or ours) not yet stored")                                \
	/* the key index (pages.c, index.c) */                                                                         \
	X(unkey_locked, 0, "unkey: the key's stripe is held, its entry not yet removed")                               \
	X(unkey_removed, 0, "unkey: the entry is removed, the key flag not yet cleared")                               \
	X(index_rebuild, 0, "index: a stripe whose writer died is being rebuilt from the page table")                  \
	X(lock_busy, HC_PTF_SPIN, "a shared lock is held by another process; trying again")                            \
	/* reserve by key (reserve.c) */                                                                               \
	X(reserve_allocated, 0, "reserve: the pages are ours, none keyed yet")                                         \
	X(reserve_keyed, 0, "reserve: a page has its key, not yet in the index (stripe held)")                         \
	X(reserve_inserted, 0, "reserve: a page is in the index, its stripe not yet let go")                           \
	X(reserve_undo, 0, "reserve: giving back what a failed reservation took")                                      \
	/* eviction (evict.c) */                                                                                       \
	X(evict_victim, 0, "evict: a victim is chosen, its retirement not yet begun")                                  \
	/* the LRU list (lru.c) */                                                                                     \
	X(lru_moving, 0, "LRU: a page is off the list (lock held), not yet linked at the tail")                        \
	X(lru_rebuild, 0, "LRU: a process died holding the list; it is being rebuilt from the page table")             \
	/* recovery of a dead slot (ranks.c, pages.c, ticket.c, engine.c) */                                           \
	X(recover_begin, 0, "recovery: the dead slot is ours (RECOVERING), nothing undone yet")                        \
	X(recover_page_seen, 0, "recovery: a page of the dead slot is read, not yet settled")                          \
	X(recover_quarantined, 0, "recovery: its reservation is quarantined, the key not yet out")                     \
	X(recover_orphaned, 0, "recovery: a READY page it allocated without a key is being freed")                     \
	X(recover_pins, 0, "recovery: its pins are being dropped, page by page")                                       \
	X(recover_engine, 0, "recovery: its holds are undone, its engine membership not yet cleared")                  \
	X(recover_end, 0, "recovery: all undone, the slot not yet FREE nor its mutex consistent")                      \
	X(probe_busy, HC_PTF_SPIN, "probe: another process holds the slot's mutex for a moment")                       \
	/* the sweep of every recovery (pages.c) */                                                                    \
	X(sweep_seen, 0, "sweep: a page to settle is read (quarantine ran out, or complete)")                          \
	X(sweep_unkeyed, 0, "sweep: a quarantined page is out of the index, not yet FREE")                             \
	/* repair of damage (repair.c) */                                                                              \
	X(repair_page_seen, 0, "repair: a page is read, not yet mended")                                               \
	X(repair_scrapped, 0, "repair: a damaged ticket is DROPPING as ours, its holds not yet dropped")               \
	X(repair_bit_dropped, 0, "repair: a stray ticket bit is dropped, the record not yet read again")               \
	/* rank slots (ranks.c) */                                                                                     \
	X(rank_claimed, 0, "claim: the slot's mutex is ours, the high-water mark not yet raised")                      \
	X(rank_release, 0, "detach: our holds are undone, the slot's mutex not yet let go")                            \
	X(rank_unstick, 0, "repair: a free slot's lock word no rank holds is read, not yet cleared")                   \
	/* engines (engine.c) */                                                                                       \
	X(engine_joined, 0, "engine join: our membership is stored, the engine lock not yet let go")                   \
	X(engine_left, 0, "engine leave: the engine's tickets ended (if it was the last), membership not yet cleared") \
	/* tickets (ticket.c) */                                                                                       \
	X(ticket_taken, 0, "ticket: a record is ours (BUILDING), its name not yet written")                            \
	X(ticket_reused, 0, "ticket: a CLOSED record was taken for a new name")                                        \
	X(ticket_built, 0, "ticket: the answer is in the record, OPEN not yet published")                              \
	X(ticket_wait, HC_PTF_SPIN, "ticket: another rank is building it; waiting")                                    \
	X(ticket_joined, 0, "ticket: the answer is copied and our holds taken, our share not yet claimed")             \
	X(ticket_claimed, 0, "ticket: our share is claimed (the last: DROPPING), nothing dropped yet")                 \
	X(ticket_expired, 0, "ticket: an overdue ticket is DROPPING, its holds not yet dropped")                       \
	X(ticket_drop, 0, "ticket: dropping its holds, page by page")                                                  \
	X(ticket_dropped, 0, "ticket: every hold is dropped, CLOSED not yet stored")                                   \
	X(ticket_released, 0, "ticket release: a rank's holds are being given back")                                   \
	/* the request path's rings (ring.c) */                                                                        \
	X(ring_posted, 0, "ring: entries are written, the tail not yet published")                                     \
	X(ring_consumed, 0, "ring: entries are copied out, the head not yet published")                                \
	/* the service (lib/service/service.c, lib/service/request.c, lib/service/stage.c, lib/service/transfer.c) */  \
	X(service_locked, 0, "service: its lifetime lock is ours, LIVE not yet stored")                                \
	X(service_stopping, 0, "service: stopping; its record is not yet cleared")                                     \
	X(stage_granted, 0, "staging: a write grant is counted, its completion not yet posted")                        \
	X(stage_released, 0, "staging: a page's transfer ended; it is being freed")                                    \
	X(prefetch_committed, 0, "prefetch: a page read from L3 is READY, the rank not yet told")                      \
	X(prefetch_taken, 0, "prefetch take: the rank pinned what was fetched, the service not yet told")

enum hc__pt {
#define HC__PT_ENUM(name, flags, what) HC_PT_##name,
	HC_POINTS(HC__PT_ENUM)
#undef HC__PT_ENUM
		HC_PT__COUNT
};

#endif /* HC_SHMPOOL_POINTS_H */
