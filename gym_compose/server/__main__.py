from gym_compose.server.entry import main

if __name__ == "__main__":
    main()
