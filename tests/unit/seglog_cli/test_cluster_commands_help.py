"""seglog partition / cluster: each action's help teaches with examples."""

import pytest

from seglog_cli import main


@pytest.mark.parametrize("command", [["partition", "move"], ["cluster", "status"], ["cluster", "rebalance"]],
                         ids=" ".join)
def test_each_cluster_command_help_teaches_with_examples(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out and f"seglog {' '.join(command)}" in out
