"""A job's options are one record, :class:`~cronbus.job_specs.JobOptions`: the HTTP API's job
bodies are built from it, and the command line's ``jobs add``/``jobs update`` flags must name
exactly its fields, so adding an option to the record without a flag (or a flag without a field)
fails here instead of leaving one door behind the others."""

from __future__ import annotations

import dataclasses

import pytest

from cronbus.api.schemas import JobChanges, JobCreate
from cronbus.cli import cronbus as cli_group
from cronbus.job_specs import JobOptions

FIELDS = {field.name for field in dataclasses.fields(JobOptions)}
# What says which job, where and how to answer: not options of the job itself.
NOT_OPTIONS = {"name", "task", "force", "app_spec", "store_url", "url", "token", "as_json"}
NOT_OPTIONS |= {"where_namespace"}


@pytest.mark.parametrize("command", ["add", "update"])
def test_the_jobs_commands_take_exactly_the_job_options(command: str) -> None:
    jobs = cli_group.commands["jobs"]
    assert hasattr(jobs, "commands")
    params = {param.name for param in jobs.commands[command].params}
    assert params - NOT_OPTIONS == FIELDS


@pytest.mark.parametrize("model", [JobCreate, JobChanges])
def test_the_api_job_bodies_take_exactly_the_job_options(model: type) -> None:
    assert set(model.model_fields) - {"name", "task"} == FIELDS
