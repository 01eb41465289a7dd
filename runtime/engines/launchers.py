"""How the torch engine's stages run (kept free of torch imports: the CLI parses it cheaply)."""

LAUNCHERS = ("threads", "spawn", "torchrun")
LAUNCHER_HELP = ("torch engine: stages as threads of this process (threads), or as torch.distributed processes "
                 "started here (spawn) or by torchrun, one host or several (torchrun)")
