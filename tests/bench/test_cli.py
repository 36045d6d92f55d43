"""`python -m ripple.bench`: bad input is one line naming the problem, exit status 2, before any run."""
from ripple.bench.cli import main


def test_bad_bench_input_is_one_line_exit_2(capsys):
    for argv, message in ((["--preset", "huge"], "unknown preset 'huge'; accepted: llada-8b, cpu, llada2-mini, sdar-8b, llada2.1-mini, tiny-moe, tiny, fast-dllm-v2-7b, "
                                          "diffusion-gemma-26b"),
                          (["--batch-equivalence", "--batch-size", "0"], "--batch-size must be a positive number"),
                          (["--batch-equivalence", "--decoders", "rsp"], "unknown decoder 'rsp'"),
                          (["--batch-sizes", "1,x"], "--batch-sizes takes comma-separated positive integers")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
