"""[[clusters]] in a real config.toml: a good entry is taken whole; each wrong one is
refused with a sentence naming the cluster and what is wrong, and the rest of the file
still loads (a typo in a cluster never stops the app)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import ClusterConfig, Settings

GOOD = '''
[[clusters]]
name = "desk"
hosts = ["10.0.0.1", "10.0.0.2"]
model = "/Users/me/models/Qwen3-235B-4bit"
python = "/Users/me/venv/bin/python"
port = 8123
'''


def load(tmp_path: Path, text: str) -> Settings:
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    return Settings.load(path)


def test_a_good_cluster_is_read_with_its_defaults(tmp_path: Path) -> None:
    settings = load(tmp_path, 'context_size = 8192\n' + GOOD)
    assert settings.problems == []
    desk = settings.cluster("desk")
    assert desk == ClusterConfig(name="desk", hosts=["10.0.0.1", "10.0.0.2"],
                                 model="/Users/me/models/Qwen3-235B-4bit",
                                 python="/Users/me/venv/bin/python", port=8123)
    assert (desk.backend, desk.mode, desk.ring_port) == ("ring", "tensor", 0)
    assert settings.cluster("other") is None


def test_a_hostfile_cluster_with_jaccl_is_taken(tmp_path: Path) -> None:
    settings = load(tmp_path, '[[clusters]]\nname = "tb5"\nhostfile = "~/tb5.json"\n'
                              'backend = "jaccl"\nmode = "pipeline"\nmodel = "~/m"\n')
    assert settings.problems == []
    assert settings.cluster("tb5").backend == "jaccl"


def test_a_saved_cluster_reads_back_the_same(tmp_path: Path) -> None:
    settings = load(tmp_path, GOOD)
    settings.save(tmp_path / "config.toml")
    assert load(tmp_path, (tmp_path / "config.toml").read_text()).clusters == settings.clusters


BASE = 'name = "c"\nmodel = "/m"\n'
HOSTS = 'hosts = ["10.0.0.1", "10.0.0.2"]\n'
REFUSED = [
    (BASE + HOSTS + 'backend = "mpi"\n', "backend must be \"ring\""),
    (BASE + HOSTS + 'mode = "data"\n', "mode must be \"tensor\""),
    (BASE + HOSTS + "port = 70000\n", "port must be 0"),
    (BASE + HOSTS + 'port = "80"\n', "port must be a whole number"),
    (BASE + HOSTS + "ring_port = -1\n", "ring_port must be 0"),
    (BASE, "needs either hosts"),
    (BASE + HOSTS + 'hostfile = "/h.json"\n', "not both"),
    (BASE + 'hosts = ["10.0.0.1"]\n', "two hosts or more"),
    (BASE + 'hosts = ["mac1", "mac2"]\n', "connects to IP addresses"),
    (BASE + 'hosts = ["10.0.0.1", "x;rm -rf /"]\n', "is not an IP address or a host name"),
    (BASE + 'hosts = ["10.0.0.1", "-oProxyCommand=x"]\n', "is not an IP address or a host name"),
    (BASE + HOSTS + 'backend = "jaccl"\n', "jaccl needs a hostfile"),
    ('name = "a b"\nmodel = "/m"\n' + HOSTS, "letters, digits"),
    ('name = "c"\nmodel = "models/x"\n' + HOSTS, "full path"),
    ('name = "c"\n' + HOSTS, "needs model"),
    (BASE + 'hosts = "10.0.0.1,10.0.0.2"\n', "hosts must be a list"),
    (BASE + HOSTS + 'gpus = 2\n', "gpus"),
]


@pytest.mark.parametrize(("entry", "said"), REFUSED)
def test_a_wrong_cluster_is_refused_with_a_sentence(tmp_path: Path, entry: str, said: str) -> None:
    settings = load(tmp_path, f"context_size = 8192\n[[clusters]]\n{entry}")
    assert settings.clusters == []
    assert settings.context_size == 8192  # the rest of the file is still read
    assert len(settings.problems) == 1
    assert said in settings.problems[0], settings.problems


def test_two_clusters_of_one_name_keep_the_first(tmp_path: Path) -> None:
    settings = load(tmp_path, GOOD + GOOD.replace("8123", "9000"))
    assert [c.port for c in settings.clusters] == [8123]
    assert "a second cluster is named 'desk'" in settings.problems[0]


def test_a_huge_hostile_name_is_named_short_and_inert(tmp_path: Path) -> None:
    """A cluster name of 5,000 characters with an escape sequence in it: the problem
    `doctor`, `serve` and `cluster up` print names it in a few dozen characters, the
    escape shown, not sent (it was printed whole: a 10 KB line)."""
    name = "x\\u001b]0;pwned\\u0007" + "A" * 5000
    settings = load(tmp_path, f'[[clusters]]\nname = "{name}"\nmodel = "/m"\n'
                              'hosts = ["10.0.0.1", "10.0.0.2"]\n')
    assert settings.clusters == [] and len(settings.problems) == 1
    said = settings.problems[0]
    assert len(said) < 300 and "\x1b" not in said and "letters, digits" in said, said
