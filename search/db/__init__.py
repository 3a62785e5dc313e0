"""The data layer: the engine, the tables, every statement hpsearch runs against a study
database (by concern), the migrations and the roles. It imports nothing above it (`search.errors`
only): no study config, no sampler, pruner, worker or command.

- `storage`: URLs, password masking, engines; every connection and transaction comes from
  `Storage` (``transaction``, ``autocommit``, ``read``);
- `tables`: the tables (Optuna's and hpsearch's), declared once;
- `statements`: shared pieces, and where PostgreSQL and SQLite differ;
- `leases`: which worker holds a trial, and the fence every write passes;
- `liveness`: registering, heartbeats, and queuing again the trials of dead workers;
- `claims`: a worker taking the next trial;
- `trial_rows`: creating trial rows for the samplers, one process at a time;
- `fenced_writes`: a held trial's reports, its end, its hand-back;
- `checkpoint_pointers`: which artifact holds a trial's latest checkpoint;
- `crash_budget`: a trial that takes its worker down too often ends FAIL;
- `budget`: a study's epoch budget, one counter every worker reserves from;
- `pauses`: trials paused at a rung (promotion-based ASHA), their promotion and the study's end;
- `status`: what `hpsearch status` and the progress lines read;
- `migrate` (the Alembic revisions in the top-level `migrations/`) and `roles`: the DDL, run by
  `hpsearch migrate` alone.
"""

from search.db.migrate import check_schema, upgrade
from search.db.storage import Storage, StorageError, open_storage, resolve_url

__all__ = ["Storage", "StorageError", "check_schema", "open_storage", "resolve_url", "upgrade"]
