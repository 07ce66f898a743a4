from gym_compose.cli import main

main()
