"""A worker whose own sample-ahead thread is sampling waits for it instead of polling."""

from __future__ import annotations

import threading
import time

from search.db.storage import open_storage
from search.sampling.sample_ahead import TrialSampler
from search.study.studies import create_study
from tests.helpers.configs import tpe_config


def test_the_loop_waits_for_its_own_sampler_thread_and_hears_what_it_created(
    storage_url: str, study_name: str
) -> None:
    storage = open_storage(storage_url, create=True)
    ref, _ = create_study(storage, tpe_config(study_name, 9))
    sampler = TrialSampler(storage, ref, "w-1")
    answers: list[bool] = []

    def loop_top_up(stop: threading.Event) -> None:
        answers.append(sampler.top_up(stop=stop))

    # The sample-ahead thread holds the process's sampling (simulated: its lock held here).
    sampler._sampling.acquire()
    stop = threading.Event()
    waiting = threading.Thread(target=loop_top_up, args=(stop,))
    waiting.start()
    time.sleep(0.3)
    assert waiting.is_alive() and answers == []  # not told "somebody else samples" at once
    sampler._created = True  # the sampler thread's batch went in
    sampler._sampling.release()
    waiting.join(timeout=5)
    assert answers == [True]  # look again at once: its trials are queued

    # A stop ends the wait.
    sampler._sampling.acquire()
    stopped = threading.Thread(target=loop_top_up, args=(stop,))
    stopped.start()
    stop.set()
    stopped.join(timeout=5)
    sampler._sampling.release()
    assert not stopped.is_alive() and answers == [True, False]
