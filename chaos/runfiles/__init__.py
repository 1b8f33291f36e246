"""What one run writes down and reads back: every path of its run directory (``RunDir``),
the event kinds and the merged timeline, the run record (``journal.json``), the fault
journal and the resource journal (each written before the thing exists, so that cleanup
works from them alone), the journal's syncing thread, the live tail of the event files.
Knows no fault type, backend or workload.
"""
