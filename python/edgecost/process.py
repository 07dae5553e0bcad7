"""The training process's own memory (Linux /proc), and work run in a forked copy of it, so that
planning and trial steps never raise the peak RSS of the process that trains."""

import os
import pickle
import traceback


PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
FORKED_THREADS = 1  # torch's threads in a forked copy: GNU OpenMP's thread pool does not survive a fork


def _status_bytes(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def rss_bytes():
    """The resident set now (VmRSS)."""
    return _status_bytes("VmRSS")


def peak_rss_bytes():
    """The resident set's high-water mark (VmHWM): what the device must have had free."""
    return _status_bytes("VmHWM")


def reset_peak_rss():
    """Sets VmHWM to the RSS now (Linux 4.0's clear_refs 5); False where that is not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def can_fork():
    return hasattr(os, "fork") and os.path.exists("/proc/self/status")


def run_forked(work):
    """work() in a forked copy of this process, returning its (picklable) result or raising its
    error. The copy runs torch at FORKED_THREADS."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the copy: never returns into the caller's code
        os.close(read_end)
        status = 0
        try:
            import torch
            torch.set_num_threads(FORKED_THREADS)
            payload = pickle.dumps(("ok", work()))
        except BaseException as error:  # noqa: B902 - everything goes back to the parent
            status = 1
            try:
                payload = pickle.dumps(("error", error))
            except Exception:
                payload = pickle.dumps(("error", RuntimeError("".join(traceback.format_exception(error)))))
        with os.fdopen(write_end, "wb") as out:
            out.write(payload)
        os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as result:
        payload = result.read()
    _, wait_status = os.waitpid(pid, 0)
    if not payload:
        raise RuntimeError(f"the forked planning process died ({os.waitstatus_to_exitcode(wait_status)}) "
                           "before it could say why")
    kind, value = pickle.loads(payload)
    if kind == "error":
        raise value
    return value


def file_pagemap():
    """/proc/self/pagemap's entries for each file mapping (the libraries' code and data), as bytes:
    few, large objects, which leave nothing behind in the heap once freed."""
    entries = {}
    with open("/proc/self/maps") as maps, open("/proc/self/pagemap", "rb") as pagemap:
        for line in maps:
            fields = line.split()
            if len(fields) < 6 or fields[4] == "0":  # inode 0: anonymous memory
                continue
            start, end = (int(x, 16) // PAGE_BYTES for x in fields[0].split("-"))
            pagemap.seek(start * 8)
            entries[fields[0]] = pagemap.read((end - start) * 8)
    return entries


def _present(entries):
    import numpy
    return numpy.frombuffer(entries, dtype="<i8") < 0  # bit 63: the page is present


class PeakMeter:
    """In a forked copy of a process that took `pagemap_here` (file_pagemap()), how far the work
    since the meter started raises the peak RSS that process would see, phase by phase. A fork maps
    none of the libraries' code resident before it: of the code pages the copy reads in again, only
    those the process lacks count (code_pages_bytes)."""

    def __init__(self, pagemap_here):
        self.pagemap_here = pagemap_here
        reset_peak_rss()
        self.rss_before, self.file_before = rss_bytes(), _status_bytes("RssFile")

    def phase_peak_bytes(self):
        """The peak rise since the last call (without the code read in again), and starts the next phase."""
        peak = peak_rss_bytes() - self.rss_before
        reset_peak_rss()
        return peak

    def code_pages_bytes(self):
        """What to add to each phase's peak: the code pages the process lacks, less all the copy read in."""
        new_pages = 0
        for mapping, entries in file_pagemap().items():
            present, here = _present(entries), self.pagemap_here.get(mapping, b"")
            new_pages += int((present & ~_present(here)).sum() if len(here) == len(entries) else present.sum())
        return new_pages * PAGE_BYTES - (_status_bytes("RssFile") - self.file_before)
