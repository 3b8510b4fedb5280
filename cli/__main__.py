from cohort.cli import main

main()
