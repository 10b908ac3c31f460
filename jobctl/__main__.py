from jobctl.cli import main

main()
