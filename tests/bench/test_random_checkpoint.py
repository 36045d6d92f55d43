"""`python -m ripple.bench --write-checkpoint`: a random LLaDA2 checkpoint in the real sharded format
that `ripple generate` loads and decodes."""
import json

from ripple.bench.cli import main


def test_random_llada2_checkpoint_in_two_shards_loads_and_decodes(tmp_path, capsys):
    from ripple.cli import main as ripple

    assert main(["--preset", "tiny-moe", "--write-checkpoint", str(tmp_path / "ck"), "--dtype", "bfloat16"]) == 0
    assert "wrote" in capsys.readouterr().out
    index = json.loads((tmp_path / "ck" / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) == 2
    argv = ["generate", "--model", str(tmp_path / "ck"), "--input-ids", "5,6,7", "--decoder", "rps",
            "--gen-length", "32", "--block-length", "16", "--dtype", "bfloat16", "--device", "cpu", "--json"]
    assert ripple(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["tokens"]) == 32 and out["nfe"] > 0
