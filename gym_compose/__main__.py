from gym_compose.cli.main import main

main()
