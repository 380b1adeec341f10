"""The ``redis-stream-recovery`` command line (:mod:`.main`): its subcommands, the routing
of each to its job (:mod:`.routes`), the checks before spark-submit (:mod:`.precheck`), the
runs in the command's own Python (:mod:`.in_process`), the handler modules it ships
(:mod:`.local_modules`), ``init`` (:mod:`.init_command`) and ``console`` (:mod:`.console`).
The jobs it runs are ``recovery.jobs``'s command classes."""
