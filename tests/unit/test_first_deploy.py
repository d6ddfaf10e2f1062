"""`make deploy`'s first run (dev/pgdrain_dev/first_deploy.py): it asks only how to reach the
database, the network and the alarms' e-mail; what it answers passes the template's rules with
every other parameter at its default; a bad answer is asked again with what is wrong; a
DatabaseUrl is read without echo and never saved."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_template_deploy import PARAMETERS, refusals

from pgdrain_dev import first_deploy

SECRET = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:pgdrain-AbCdEf"
SCRIPTS = {
    "secret": ["1", SECRET, "", "", "", "", "", ""],
    "secret in a VPC, alarms": ["secret", SECRET, "", "", "db.x.eu-west-1.rds.amazonaws.com",
                                "app", "subnet-0a1, subnet-0b2", "sg-0c3",
                                "ops@example.com"],
    "iam": ["2", "db.x.eu-west-1.rds.amazonaws.com", "app", "pgdrain_app", "db-ABC123", "",
            ""],
    "url": ["3", "", ""],
}
URL = "postgresql://u:p%40ss@db.example.com:5432/app"


def run(script: list[str], hidden: list[str] | None = None):
    answers, secrets, said, asked = iter(script), iter(hidden or []), [], []

    def read(prompt: str) -> str:
        asked.append(prompt)
        return next(answers)

    def read_hidden(prompt: str) -> str:
        asked.append(prompt)
        return next(secrets)

    parameters = first_deploy.interview(read, read_hidden, said.append)
    assert next(answers, None) is None, "answers left over: a question was not asked"
    return parameters, said, asked


@pytest.mark.parametrize("case", SCRIPTS)
def test_each_mode_asks_a_few_questions_and_passes_every_rule(case):
    parameters, _, asked = run(SCRIPTS[case], [URL] if case == "url" else [])
    assert len(asked) <= 9
    given = {k: v.split(",") if PARAMETERS[k]["Type"] == "CommaDelimitedList" else v
             for k, v in parameters.items()}
    assert refusals(**given) == []
    assert set(parameters) <= set(PARAMETERS)
    for name, value in parameters.items():  # and each passes its AllowedPattern
        pattern = PARAMETERS[name].get("AllowedPattern")
        assert pattern is None or re.fullmatch(pattern, value), (name, value)
    if case == "url":
        assert parameters == {"DatabaseUrl": URL}


def test_the_answers_are_what_the_template_gets():
    parameters, _, _ = run(SCRIPTS["secret in a VPC, alarms"])
    assert parameters == {"DatabaseSecretArn": SECRET,
                          "DatabaseHost": "db.x.eu-west-1.rds.amazonaws.com",
                          "DatabaseName": "app", "SubnetIds": "subnet-0a1,subnet-0b2",
                          "SecurityGroupIds": "sg-0c3", "AlarmEmail": "ops@example.com"}
    parameters, _, _ = run(SCRIPTS["iam"])
    assert parameters["DatabaseIamAuth"] == "true"


def test_every_parameter_it_does_not_ask_has_a_default():
    asked = {q.parameter for qs in first_deploy.QUESTIONS.values() for q in qs}
    asked |= {q.parameter for q in first_deploy.NETWORK} | {
        first_deploy.SECURITY_GROUPS.parameter, first_deploy.ALARMS.parameter}
    assert asked <= set(PARAMETERS)
    assert all("Default" in PARAMETERS[name] for name in PARAMETERS)


@pytest.mark.parametrize(("bad", "words"), [
    ("my-secret", "arn:aws:secretsmanager"),
    ("arn:aws:s3:::bucket", "arn:aws:secretsmanager"),
])
def test_a_bad_answer_is_asked_again_saying_what_is_wrong(bad, words):
    parameters, said, asked = run(["1", bad, SECRET, "", "", "", "", "", ""])
    assert parameters == {"DatabaseSecretArn": SECRET}
    assert asked.count(asked[1]) == 2 and any(words in line for line in said)


def test_an_empty_url_is_asked_again_not_taken():
    """sam deploy --guided's trap: a NoEcho parameter. Here Enter on it is refused with a
    message, and the value is read without echo."""
    parameters, said, _ = run(["url", "", ""], ["", "mysql://x", URL])
    assert parameters == {"DatabaseUrl": URL}
    assert sum("starts with postgresql://" in line for line in said) == 2
    assert not any(URL in line for line in said)


def test_vpc_subnets_need_security_groups_and_bad_ids_are_refused():
    parameters, said, _ = run(["1", SECRET, "", "", "", "", "subnet-1, nope", "subnet-1",
                               "", "sg-1", ""])
    assert parameters["SubnetIds"] == "subnet-1" and parameters["SecurityGroupIds"] == "sg-1"
    assert len([line for line in said if "comma-separated ids" in line]) == 2


def test_the_deploy_command_saves_answers_unless_one_is_a_secret():
    command = first_deploy.deploy_command("sam", "pgdrain", "eu-west-1", {
        "DatabaseSecretArn": SECRET, "AlarmEmail": "ops@example.com"})
    assert command[:6] == ["sam", "deploy", "--stack-name", "pgdrain", "--region", "eu-west-1"]
    assert f'DatabaseSecretArn="{SECRET}"' in command and command[-1] == "--save-params"
    command = first_deploy.deploy_command("sam", "pgdrain", "eu-west-1", {"DatabaseUrl": URL})
    assert "--save-params" not in command


def test_an_override_with_quotes_and_spaces_is_quoted_for_sam():
    [override] = first_deploy.deploy_command("sam", "s", "r", {"K": 'a "b" c'})[7:8]
    assert override == 'K="a \\"b\\" c"'


@pytest.mark.parametrize("url", ["postgresql://u:p w@h/d", 'postgresql://u:p"w@h/d',
                                 "postgresql://u:p\\w@h/d"])
def test_a_url_sam_would_not_read_back_as_typed_is_refused(url):
    with pytest.raises(first_deploy.Invalid, match="percent-encode"):
        first_deploy.database_url(url)


def test_stopping_at_a_question_deploys_nothing(monkeypatch, capsys):
    def eof(prompt: str) -> str:
        raise EOFError

    monkeypatch.setattr("builtins.input", eof)
    ran = []
    monkeypatch.setattr(first_deploy.subprocess, "run", lambda *a, **k: ran.append(a))
    assert first_deploy.main(["--sam", "sam", "--stack-name", "s", "--region", "r"]) == 1
    assert not ran and "nothing was created" in capsys.readouterr().err


def test_docs_deploy_shows_every_prompt_as_the_code_asks_it():
    text = (Path(__file__).resolve().parents[2] / "docs" / "deploy.md").read_text()
    shown = [q.prompt for q in (*first_deploy.QUESTIONS["secret"], *first_deploy.NETWORK,
                                first_deploy.SECURITY_GROUPS, first_deploy.ALARMS)]
    for prompt in shown:
        assert f"{prompt}:" in text, prompt
    for mode, description in first_deploy.MODES.items():
        assert f"{mode}: {description}" in text
