"""The leaf utilities every layer uses, importing no other module of the package: atomic writes,
one creator of a shared database or cache, writable directories, default paths, exit codes and
the one-line error, plain-text tables, the reports' document model, quiet libraries, progress
displays, masked credentials, worker processes that end with their parent, the
multiple-comparison corrections' names, and the strict base of every typed config (docs/architecture.md, "Layers")."""
