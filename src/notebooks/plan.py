# Databricks notebook source
# MAGIC %md
# MAGIC # binlake: plan the snapshot
# MAGIC
# MAGIC The first task of the `binlake` job (resources/binlake.job.yml). It plans the snapshot chunks of the
# MAGIC captured tables into the split state and hands the chunk-group ids to the `snapshot` for_each task
# MAGIC as the task value `groups`. It is a notebook because Databricks documents
# MAGIC `dbutils.jobs.taskValues.set` for Python notebooks only.
# MAGIC
# MAGIC The job passes its settings as notebook parameters (`base_parameters`), one widget per
# MAGIC `binlake-plan` parameter (`source_host`, `tables`, ...); the source password is read from the
# MAGIC secret scope and key they name.
# MAGIC
# MAGIC A serverless notebook task takes no job environment (`environment_key` is for Python script, wheel
# MAGIC and dbt tasks), so the next cell installs binlake into the notebook-scoped environment, from the
# MAGIC bundle files deployed two folders up. The runtime provides Spark and Delta; binlake's dependencies
# MAGIC list neither.

# COMMAND ----------

# MAGIC %pip install --quiet ../..

# COMMAND ----------

dbutils.library.restartPython()  # noqa: F821 - the notebook runtime provides dbutils

# COMMAND ----------

from binlake.databricks.entrypoints import plan_in_notebook

plan_in_notebook(dbutils)  # noqa: F821
