"""Is the Simulator instant? One lesson executed end to end (both workers, the throw-away store made and
removed), one key press (the stepper running one boundary of the real runtime), a step back (the execution
again to the stop before), and the whole matrix of settings x crash points, each through the real runtime.

    python bench/simulator.py
"""

from __future__ import annotations

import statistics
import time

from tui_agent.sim import LESSONS, simulate
from tui_agent.sim.stepper import RUN, STEP, Stepper
from tui_agent.sim.table import whole_matrix

REPS = 20
GOALS = {"lesson_ms": 100.0, "matrix_s": 60.0}


def lesson_ms() -> dict[str, float]:
    simulate(LESSONS[0].phases[0].settings)   # the empty store's template is made once per process
    times = {}
    for lesson in LESSONS:
        for part, phase in enumerate(lesson.phases, 1):
            samples = []
            for _ in range(REPS):
                t0 = time.perf_counter()
                simulate(phase.settings)
                samples.append((time.perf_counter() - t0) * 1000)
            times[f"lesson {lesson.number}.{part}"] = statistics.median(samples)
    return times


def key_press_ms() -> float:
    """The median time of `space`: one boundary of the real runtime, in the scenario's own thread."""
    samples = []
    for _ in range(REPS):
        stepper = Stepper(LESSONS[2].phases[0].settings)
        view = stepper.start()
        while view.outcome is None:
            t0 = time.perf_counter()
            view = stepper.command(STEP)
            samples.append((time.perf_counter() - t0) * 1000)
        stepper.close()
    return statistics.median(samples)


def step_back_ms() -> float:
    """The median time of a step back from the end of the document's step 2: a new stepper through the same
    presses, less the last, to the stop before the end."""
    stepper = Stepper(LESSONS[2].phases[0].settings)
    stepper.start()
    presses = stepper.command(RUN).presses
    stepper.close()
    samples = []
    for _ in range(REPS):
        t0 = time.perf_counter()
        back = Stepper(LESSONS[2].phases[0].settings, presses=presses[:-1])
        back.start()
        samples.append((time.perf_counter() - t0) * 1000)
        back.close()
    return statistics.median(samples)


def matrix_s() -> tuple[int, float]:
    rows = list(whole_matrix())
    t0 = time.perf_counter()
    for _, settings in rows:
        simulate(settings)
    return len(rows), time.perf_counter() - t0


def main() -> None:
    lessons = lesson_ms()
    for name, ms in lessons.items():
        print(f"{name}: {ms:6.1f} ms")
    worst = max(lessons.values())
    print(f"slowest lesson: {worst:.1f} ms (goal under {GOALS['lesson_ms']:.0f} ms): "
          f"{'met' if worst < GOALS['lesson_ms'] else 'NOT met'}")
    print(f"one key press (space): {key_press_ms():.2f} ms median")
    print(f"a step back from the end (the same presses again, less the last): {step_back_ms():.1f} ms median")
    count, seconds = matrix_s()
    print(f"whole matrix: {count} combinations in {seconds:.1f} s ({seconds / count * 1000:.1f} ms each; goal under "
          f"{GOALS['matrix_s']:.0f} s): {'met' if seconds < GOALS['matrix_s'] else 'NOT met'}")


if __name__ == "__main__":
    main()
