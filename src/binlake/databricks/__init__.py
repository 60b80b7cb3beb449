"""binlake on Databricks: the bundle's task entry points and the pipeline source.

The entry points (`binlake-plan`, `binlake-snapshot`) only translate job parameters, the secret scope
and task values into calls on `binlake.capture` (plan, snapshot); they hold no algorithm of their own.
"""
