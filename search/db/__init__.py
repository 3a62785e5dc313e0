"""The data layer: every statement hpsearch runs against a study database, by concern.

- `tables`: the tables (Optuna's and hpsearch's), declared once;
- `statements`: shared pieces, and where PostgreSQL and SQLite differ;
- `leases`: which worker holds a trial, and the fence every write passes;
- `liveness`: registering, heartbeats, and queuing again the trials of dead workers;
- `claims`: a worker taking the next trial;
- `trial_rows`: creating trial rows for the samplers, one process at a time;
- `fenced_writes`: a held trial's reports, its end, its hand-back;
- `checkpoint_pointers`: which artifact holds a trial's latest checkpoint.

Every connection and transaction comes from `search.db.storage.Storage` (``transaction``,
``autocommit``, ``read``).
"""
