"""The process a rank runs in: device and backend choice, launch, signals, watchdog, faults, NaN guard, profiling. Imports nothing else of titan_train."""
