// Placeholder; the trace analyzer lands here.
